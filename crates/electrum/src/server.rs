//! The `server.*` family: version, banner, features, ping, donation address
//! and peers. Pure result shaping from the server's configuration; version
//! negotiation itself lives in `session` and `version`.

use crate::error::RpcError;
use crate::version::ProtocolVersion;
use bitcoin::BlockHash;
use serde_json::{json, Value};

/// What the server says about itself (from `osprey_server::ServerConfig`).
#[derive(Debug, Clone)]
pub struct ServerInfo {
    /// E.g. "Osprey 0.1.0"; the first element of `server.version`'s result.
    pub server_version: String,
    pub banner: String,
    pub donation_address: String,
    pub genesis_hash: BlockHash,
}

/// Returns `server.version`'s result: `[server_software_version, protocol_version]`.
pub fn version(info: &ServerInfo, negotiated: ProtocolVersion) -> Value {
    json!([info.server_version, negotiated.to_string()])
}

/// Returns `server.features`. `hosts` is empty because we do not take part
/// in peer discovery. The 1.7 draft adds `method_flavours`, empty because
/// every optional feature (cp_height, verbose transactions, get_merkle
/// without a height) is supported.
pub fn features(info: &ServerInfo, protocol: ProtocolVersion) -> Value {
    let mut features = json!({
        "genesis_hash": info.genesis_hash.to_string(),
        "hosts": {},
        "protocol_max": ProtocolVersion::MAX.to_string(),
        "protocol_min": ProtocolVersion::MIN.to_string(),
        "pruning": null,
        "server_version": info.server_version,
        "hash_function": "sha256",
    });
    if protocol.is_1_7_draft() {
        features["method_flavours"] = json!({});
    }
    features
}

/// Returns `server.ping`'s result: `null` up to 1.6; in the 1.7 draft,
/// `{"data": ...}` holding `pong_len` characters of padding.
///
/// # Errors
/// `InvalidParams` when `pong_len` is above `pong_len_max`.
pub fn ping(
    protocol: ProtocolVersion,
    pong_len: u32,
    pong_len_max: usize,
) -> Result<Value, RpcError> {
    if !protocol.is_1_7_draft() {
        return Ok(Value::Null);
    }
    let len = pong_len as usize;
    if len > pong_len_max {
        return Err(RpcError::param(
            "pong_len",
            format!("exceeds the maximum of {pong_len_max}"),
        ));
    }
    Ok(json!({ "data": "0".repeat(len) }))
}

/// Returns `server.peers.subscribe`'s result: we know of no peers.
pub fn peers() -> Value {
    json!([])
}

#[cfg(test)]
mod tests {
    use super::*;
    use bitcoin::hashes::Hash;

    fn info() -> ServerInfo {
        ServerInfo {
            server_version: "Osprey 0.1.0".into(),
            banner: "hi".into(),
            donation_address: String::new(),
            genesis_hash: BlockHash::all_zeros(),
        }
    }

    #[test]
    fn features_have_every_mandatory_key() {
        let f = features(&info(), ProtocolVersion::V1_7_DRAFT);
        assert_eq!(f["method_flavours"], json!({}));
        let f = features(&info(), ProtocolVersion::V1_6);
        assert!(f.get("method_flavours").is_none(), "a 1.7 draft key");
        for key in [
            "genesis_hash",
            "hosts",
            "protocol_max",
            "protocol_min",
            "pruning",
            "server_version",
            "hash_function",
        ] {
            assert!(f.get(key).is_some(), "missing {key}");
        }
        assert_eq!(f["protocol_min"], "1.4");
        assert_eq!(f["protocol_max"], "1.7");
        assert_eq!(f["hash_function"], "sha256");
        assert!(f["pruning"].is_null());
        assert_eq!(f["hosts"], json!({}));
    }

    #[test]
    fn ping_is_null_until_the_1_7_draft() {
        let v14: ProtocolVersion = "1.4.2".parse().unwrap();
        assert_eq!(ping(v14, 5, 10).unwrap(), Value::Null);
        assert_eq!(ping(ProtocolVersion::V1_6, 5, 10).unwrap(), Value::Null);
        let draft = ProtocolVersion::V1_7_DRAFT;
        assert_eq!(ping(draft, 0, 10).unwrap(), json!({"data": ""}));
        assert_eq!(ping(draft, 4, 10).unwrap(), json!({"data": "0000"}));
        assert_eq!(ping(draft, 11, 10).unwrap_err().code(), -32602);
        assert_eq!(
            version(&info(), ProtocolVersion::V1_6),
            json!(["Osprey 0.1.0", "1.6"])
        );
    }
}
