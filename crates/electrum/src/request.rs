//! The method table: turns a method name and its parameters into a typed
//! `Request`. This is the only place method strings are matched, and the
//! only place parameter names are listed (in spec order, for by-name calls).

use crate::error::RpcError;
use crate::jsonrpc::Params;
use crate::params::ParamReader;
use crate::script::{ScriptForm, ScriptKey, SCRIPTHASH_SUBSCRIBE, SCRIPTPUBKEY_SUBSCRIBE};
use crate::silent_payments::{self, SpKeys, SpSubscribeRequest, SP_SUBSCRIBE, SP_UNSUBSCRIBE};
use crate::version::ProtocolVersion;
use bitcoin::{OutPoint, Txid};
use osprey_core::{Height, ScriptHash};
use serde_json::Value;

/// Method names that also name server pushes (a notification's method is
/// its subscription's method).
pub const HEADERS_SUBSCRIBE: &str = "blockchain.headers.subscribe";
pub const OUTPOINT_SUBSCRIBE: &str = "blockchain.outpoint.subscribe";

/// Every method [`Request::parse`] knows, for per-method metrics (a test
/// checks this list against the table).
pub const METHODS: [&str; 38] = [
    "server.version",
    "server.banner",
    "server.donation_address",
    "server.add_peer",
    "server.features",
    "server.peers.subscribe",
    "server.ping",
    HEADERS_SUBSCRIBE,
    OUTPOINT_SUBSCRIBE,
    "blockchain.outpoint.get_status",
    "blockchain.outpoint.unsubscribe",
    "blockchain.block.header",
    "blockchain.block.headers",
    "blockchain.estimatefee",
    "blockchain.relayfee",
    "blockchain.scripthash.get_balance",
    "blockchain.scripthash.get_history",
    "blockchain.scripthash.get_mempool",
    "blockchain.scripthash.listunspent",
    SCRIPTHASH_SUBSCRIBE,
    "blockchain.scripthash.unsubscribe",
    "blockchain.scriptpubkey.get_balance",
    "blockchain.scriptpubkey.get_history",
    "blockchain.scriptpubkey.get_mempool",
    "blockchain.scriptpubkey.listunspent",
    SCRIPTPUBKEY_SUBSCRIBE,
    "blockchain.scriptpubkey.unsubscribe",
    "blockchain.transaction.broadcast",
    "blockchain.transaction.broadcast_package",
    "blockchain.transaction.get",
    "blockchain.transaction.get_merkle",
    "blockchain.transaction.id_from_pos",
    "blockchain.transaction.testmempoolaccept",
    "mempool.get_fee_histogram",
    "mempool.get_info",
    "mempool.recent",
    SP_SUBSCRIBE,
    SP_UNSUBSCRIBE,
];

/// The `blockchain.scripthash.*` / `blockchain.scriptpubkey.*` methods.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScriptMethod {
    GetBalance,
    GetHistory,
    GetMempool,
    ListUnspent,
    Subscribe,
    Unsubscribe,
}

/// A parsed, validated request.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    ServerVersion {
        client_name: String,
        min: ProtocolVersion,
        max: ProtocolVersion,
    },
    ServerBanner,
    ServerDonationAddress,
    ServerFeatures,
    ServerPeersSubscribe,
    /// Another server asks to be listed; `features` is an object (what its
    /// `server.features` returns), read by `server::PeerFeatures`.
    ServerAddPeer {
        features: Value,
    },
    /// Below 1.7 both are ignored and the answer is `null`; 1.7 answers
    /// with `pong_len` characters of padding.
    ServerPing {
        pong_len: u32,
    },
    HeadersSubscribe,
    BlockHeader {
        height: Height,
        cp_height: Height,
    },
    BlockHeaders {
        start_height: Height,
        count: u32,
        cp_height: Height,
    },
    EstimateFee {
        number: u32,
        mode: Option<String>,
    },
    RelayFee,
    Script {
        method: ScriptMethod,
        key: ScriptKey,
    },
    /// `blockchain.outpoint.get_status` (1.7); `spk_hint` is the hash of
    /// the script the client says the output pays.
    OutpointGetStatus {
        outpoint: OutPoint,
        spk_hint: ScriptHash,
    },
    OutpointSubscribe {
        outpoint: OutPoint,
        spk_hint: ScriptHash,
    },
    OutpointUnsubscribe {
        outpoint: OutPoint,
    },
    TxBroadcast {
        raw_tx: String,
    },
    TxBroadcastPackage {
        raw_txs: Vec<String>,
        verbose: bool,
    },
    TxGet {
        txid: Txid,
        verbose: bool,
    },
    TxGetMerkle {
        txid: Txid,
        height: Height,
    },
    TxIdFromPos {
        height: Height,
        tx_pos: u32,
        merkle: bool,
    },
    /// `blockchain.transaction.testmempoolaccept` (1.7).
    TxTestMempoolAccept {
        raw_txs: Vec<String>,
    },
    MempoolFeeHistogram,
    MempoolGetInfo,
    /// `mempool.recent` (1.7).
    MempoolRecent,
    /// `blockchain.silentpayments.subscribe` (Frigate's protocol, at every
    /// version). `Debug` never shows the scan key.
    SilentPaymentsSubscribe(SpSubscribeRequest),
    SilentPaymentsUnsubscribe(SpKeys),
}

/// `estimatesmartfee` modes we pass to the node (a fixed list, so clients
/// cannot send it arbitrary strings).
const ESTIMATE_MODES: [&str; 3] = ["ECONOMICAL", "CONSERVATIVE", "UNSET"];

impl Request {
    /// Whether the answer is right before the index reaches the node's tip
    /// (during the first sync): the server's own methods, headers up to
    /// the indexed tip, and what the node answers about fees. Anything
    /// about scripts, transactions, outpoints, the mempool or silent
    /// payments would be partial then. Every variant is named, so a new
    /// method cannot slip through without a decision.
    pub fn answered_while_indexing(&self) -> bool {
        match self {
            Request::ServerVersion { .. }
            | Request::ServerBanner
            | Request::ServerDonationAddress
            | Request::ServerFeatures
            | Request::ServerPeersSubscribe
            | Request::ServerAddPeer { .. }
            | Request::ServerPing { .. }
            | Request::HeadersSubscribe
            | Request::BlockHeader { .. }
            | Request::BlockHeaders { .. }
            | Request::EstimateFee { .. }
            | Request::RelayFee
            | Request::MempoolGetInfo => true,
            Request::Script { .. }
            | Request::OutpointGetStatus { .. }
            | Request::OutpointSubscribe { .. }
            | Request::OutpointUnsubscribe { .. }
            | Request::TxBroadcast { .. }
            | Request::TxBroadcastPackage { .. }
            | Request::TxGet { .. }
            | Request::TxGetMerkle { .. }
            | Request::TxIdFromPos { .. }
            | Request::TxTestMempoolAccept { .. }
            | Request::MempoolFeeHistogram
            | Request::MempoolRecent
            | Request::SilentPaymentsSubscribe(_)
            | Request::SilentPaymentsUnsubscribe(_) => false,
        }
    }

    /// Parses a call into a request as `protocol` defines it: the 1.7
    /// methods only exist once a session negotiated 1.7, and the
    /// `blockchain.scripthash.*` methods only before it.
    ///
    /// # Errors
    /// `MethodNotFound` for a method unknown at `protocol`, `InvalidParams`
    /// naming the parameter for anything else.
    pub fn parse(
        method: &str,
        params: &Params,
        protocol: ProtocolVersion,
    ) -> Result<Request, RpcError> {
        use Request as R;
        let reader = |names: &'static [&'static str]| ParamReader::new(names, params, false);
        let script = |m: ScriptMethod| -> Result<Request, RpcError> {
            // protocol-changes, 1.7: "The `blockchain.scripthash.*` methods
            // are all replaced with `blockchain.scriptpubkey.*` methods."
            if protocol.is_1_7_or_later() {
                return Err(RpcError::MethodNotFound(format!(
                    "{method} (removed in 1.7, which this session speaks: use \
                     blockchain.scriptpubkey.*)"
                )));
            }
            let p = reader(&["scripthash"])?;
            let scripthash = p.scripthash(0)?;
            Ok(R::Script {
                method: m,
                key: ScriptKey {
                    scripthash,
                    form: ScriptForm::ScriptHash,
                },
            })
        };
        let since_1_7 = || -> Result<(), RpcError> {
            if protocol.is_1_7_or_later() {
                return Ok(());
            }
            Err(RpcError::MethodNotFound(format!(
                "{method} (a 1.7 method; this session speaks {protocol})"
            )))
        };
        let spk = |m: ScriptMethod| -> Result<Request, RpcError> {
            since_1_7()?;
            let p = reader(&["scriptpubkey"])?;
            let scripthash = ScriptHash::from_script(&p.script(0)?);
            Ok(R::Script {
                method: m,
                key: ScriptKey {
                    scripthash,
                    form: ScriptForm::ScriptPubKey,
                },
            })
        };
        let outpoint = |p: &ParamReader| -> Result<OutPoint, RpcError> {
            Ok(OutPoint {
                txid: p.txid(0)?,
                vout: p.u32(1)?,
            })
        };
        // `(tx_hash, txout_idx, spk_hint)` of `subscribe` and `get_status`:
        // 1.7 made the hint mandatory ("Clients should always know the
        // spk_hint in practice, so having to send it is not expected to
        // kill any use case"), for servers that cannot find an output
        // without its script. Osprey can, and uses it only as a hint.
        let hinted_outpoint = || -> Result<(OutPoint, ScriptHash), RpcError> {
            since_1_7()?;
            let p = reader(&["tx_hash", "txout_idx", "spk_hint"])?;
            Ok((outpoint(&p)?, ScriptHash::from_script(&p.script(2)?)))
        };
        let none = |r: Request| -> Result<Request, RpcError> {
            reader(&[])?;
            Ok(r)
        };
        match method {
            "server.version" => {
                let p = ParamReader::new(&["client_name", "protocol_version"], params, true)?;
                let client_name = p.opt_str(0)?.unwrap_or_default().to_string();
                let (min, max) = parse_protocol_range(p.opt_value(1))?;
                Ok(R::ServerVersion {
                    client_name,
                    min,
                    max,
                })
            }
            "server.banner" => none(R::ServerBanner),
            "server.donation_address" => none(R::ServerDonationAddress),
            "server.features" => none(R::ServerFeatures),
            "server.peers.subscribe" => none(R::ServerPeersSubscribe),
            "server.add_peer" => {
                let p = reader(&["features"])?;
                match p.opt_value(0) {
                    Some(features @ Value::Object(_)) => Ok(R::ServerAddPeer {
                        features: features.clone(),
                    }),
                    Some(_) => Err(RpcError::param("features", "must be an object")),
                    None => Err(RpcError::param("features", "missing required parameter")),
                }
            }
            "server.ping" => {
                let p = reader(&["pong_len", "data"])?;
                let pong_len = p.opt_u32(0)?.unwrap_or(0);
                if let Some(data) = p.opt_str(1)? {
                    // 1.6 lets the data have an odd length: it is padding.
                    if !data.bytes().all(|b| b.is_ascii_hexdigit()) {
                        return Err(RpcError::param("data", "must be a hex string"));
                    }
                }
                Ok(R::ServerPing { pong_len })
            }
            HEADERS_SUBSCRIBE => none(R::HeadersSubscribe),
            "blockchain.block.header" => {
                let p = reader(&["height", "cp_height"])?;
                let height = p.height(0)?;
                let cp_height = p.opt_height(1)?.unwrap_or(Height(0));
                Ok(R::BlockHeader { height, cp_height })
            }
            "blockchain.block.headers" => {
                let p = reader(&["start_height", "count", "cp_height"])?;
                let start_height = p.height(0)?;
                let count = p.u32(1)?;
                let cp_height = p.opt_height(2)?.unwrap_or(Height(0));
                Ok(R::BlockHeaders {
                    start_height,
                    count,
                    cp_height,
                })
            }
            "blockchain.estimatefee" => {
                let p = reader(&["number", "mode"])?;
                let number = p.u32(0)?;
                let mode = match p.opt_str(1)? {
                    None => None,
                    Some(m) => {
                        let upper = m.to_ascii_uppercase();
                        if !ESTIMATE_MODES.contains(&upper.as_str()) {
                            return Err(RpcError::param(
                                "mode",
                                format!("unknown mode {m:?} (expected one of {ESTIMATE_MODES:?})"),
                            ));
                        }
                        Some(upper)
                    }
                };
                Ok(R::EstimateFee { number, mode })
            }
            "blockchain.relayfee" => none(R::RelayFee),
            "blockchain.scripthash.get_balance" => script(ScriptMethod::GetBalance),
            "blockchain.scripthash.get_history" => script(ScriptMethod::GetHistory),
            "blockchain.scripthash.get_mempool" => script(ScriptMethod::GetMempool),
            "blockchain.scripthash.listunspent" => script(ScriptMethod::ListUnspent),
            SCRIPTHASH_SUBSCRIBE => script(ScriptMethod::Subscribe),
            "blockchain.scripthash.unsubscribe" => script(ScriptMethod::Unsubscribe),
            "blockchain.scriptpubkey.get_balance" => spk(ScriptMethod::GetBalance),
            "blockchain.scriptpubkey.get_history" => spk(ScriptMethod::GetHistory),
            "blockchain.scriptpubkey.get_mempool" => spk(ScriptMethod::GetMempool),
            "blockchain.scriptpubkey.listunspent" => spk(ScriptMethod::ListUnspent),
            SCRIPTPUBKEY_SUBSCRIBE => spk(ScriptMethod::Subscribe),
            "blockchain.scriptpubkey.unsubscribe" => spk(ScriptMethod::Unsubscribe),
            "blockchain.outpoint.get_status" => {
                let (outpoint, spk_hint) = hinted_outpoint()?;
                Ok(R::OutpointGetStatus { outpoint, spk_hint })
            }
            OUTPOINT_SUBSCRIBE => {
                let (outpoint, spk_hint) = hinted_outpoint()?;
                Ok(R::OutpointSubscribe { outpoint, spk_hint })
            }
            "blockchain.outpoint.unsubscribe" => {
                since_1_7()?;
                let outpoint = outpoint(&reader(&["tx_hash", "txout_idx"])?)?;
                Ok(R::OutpointUnsubscribe { outpoint })
            }
            "blockchain.transaction.broadcast" => {
                let p = reader(&["raw_tx"])?;
                Ok(R::TxBroadcast {
                    raw_tx: p.hex(0)?.to_string(),
                })
            }
            "blockchain.transaction.broadcast_package" => {
                let p = reader(&["raw_txs", "verbose"])?;
                let raw_txs = p.hex_list(0)?;
                if raw_txs.is_empty() {
                    return Err(RpcError::param("raw_txs", "must not be empty"));
                }
                Ok(R::TxBroadcastPackage {
                    raw_txs,
                    verbose: p.bool_or(1, false)?,
                })
            }
            "blockchain.transaction.get" => {
                let p = reader(&["tx_hash", "verbose"])?;
                Ok(R::TxGet {
                    txid: p.txid(0)?,
                    verbose: p.bool_or(1, false)?,
                })
            }
            "blockchain.transaction.get_merkle" => {
                let p = reader(&["tx_hash", "height"])?;
                Ok(R::TxGetMerkle {
                    txid: p.txid(0)?,
                    height: p.height(1)?,
                })
            }
            "blockchain.transaction.id_from_pos" => {
                let p = reader(&["height", "tx_pos", "merkle"])?;
                Ok(R::TxIdFromPos {
                    height: p.height(0)?,
                    tx_pos: p.u32(1)?,
                    merkle: p.bool_or(2, false)?,
                })
            }
            "blockchain.transaction.testmempoolaccept" => {
                since_1_7()?;
                let p = reader(&["raw_txs"])?;
                let raw_txs = p.hex_list(0)?;
                if raw_txs.is_empty() {
                    return Err(RpcError::param("raw_txs", "must not be empty"));
                }
                Ok(R::TxTestMempoolAccept { raw_txs })
            }
            "mempool.get_fee_histogram" => none(R::MempoolFeeHistogram),
            "mempool.get_info" => none(R::MempoolGetInfo),
            "mempool.recent" => {
                since_1_7()?;
                none(R::MempoolRecent)
            }
            SP_SUBSCRIBE => {
                silent_payments::parse_subscribe(params).map(R::SilentPaymentsSubscribe)
            }
            SP_UNSUBSCRIBE => {
                silent_payments::parse_unsubscribe(params).map(R::SilentPaymentsUnsubscribe)
            }
            other => Err(RpcError::MethodNotFound(other.to_string())),
        }
    }
}

/// Parses `server.version`'s `protocol_version`: a string, or an array
/// `[protocol_min, protocol_max]`; "1.4" when absent.
fn parse_protocol_range(
    value: Option<&Value>,
) -> Result<(ProtocolVersion, ProtocolVersion), RpcError> {
    let parse = |v: &Value| -> Result<ProtocolVersion, RpcError> {
        let s = v.as_str().ok_or_else(|| {
            RpcError::param("protocol_version", "must be a string or [min, max] strings")
        })?;
        s.parse()
            .map_err(|e| RpcError::param("protocol_version", e))
    };
    match value {
        None => Ok((ProtocolVersion::DEFAULT, ProtocolVersion::DEFAULT)),
        Some(Value::Array(pair)) if pair.len() == 2 => Ok((parse(&pair[0])?, parse(&pair[1])?)),
        Some(Value::Array(_)) => Err(RpcError::param(
            "protocol_version",
            "an array must hold exactly [min, max]",
        )),
        Some(v) => {
            let version = parse(v)?;
            Ok((version, version))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn parse_at(
        method: &str,
        params: Value,
        protocol: ProtocolVersion,
    ) -> Result<Request, RpcError> {
        let params = match params {
            Value::Array(a) => Params::Positional(a),
            Value::Object(o) => Params::Named(o),
            _ => Params::None,
        };
        Request::parse(method, &params, protocol)
    }

    /// Parses as a session that negotiated 1.6.
    fn parse(method: &str, params: Value) -> Result<Request, RpcError> {
        parse_at(method, params, ProtocolVersion::V1_6)
    }

    /// Parses as a session that negotiated 1.7.
    fn parse17(method: &str, params: Value) -> Result<Request, RpcError> {
        parse_at(method, params, ProtocolVersion::V1_7)
    }

    #[test]
    fn the_method_list_is_the_table() {
        for method in METHODS {
            // Known at 1.6 or at 1.7 (the script hash methods are gone at 1.7).
            let known = |e: Option<RpcError>| e.is_none_or(|e| e.code() != -32601);
            assert!(
                known(parse(method, json!([])).err()) || known(parse17(method, json!([])).err()),
                "{method} is listed but unknown"
            );
        }
        // Every method string in the table's match arms is listed.
        let source = include_str!("request.rs");
        let table = source
            .split("match method {")
            .nth(1)
            .and_then(|rest| rest.split("other => Err(RpcError::MethodNotFound").next())
            .expect("the table");
        let mut named: Vec<&str> = table
            .lines()
            .filter_map(|line| line.trim().strip_prefix('"'))
            .filter_map(|line| line.split_once("\" =>").map(|(name, _)| name))
            .collect();
        named.extend([
            HEADERS_SUBSCRIBE,
            SCRIPTHASH_SUBSCRIBE,
            SCRIPTPUBKEY_SUBSCRIBE,
            OUTPOINT_SUBSCRIBE,
            SP_SUBSCRIBE,
            SP_UNSUBSCRIBE,
        ]);
        named.sort_unstable();
        let mut listed = METHODS.to_vec();
        listed.sort_unstable();
        assert_eq!(named, listed);
    }

    #[test]
    fn methods_of_1_7_need_1_7() {
        for v in ["1.4", "1.4.2", "1.6"] {
            let v: ProtocolVersion = v.parse().unwrap();
            for (method, params) in [
                ("blockchain.scriptpubkey.subscribe", json!([P2PKH])),
                ("blockchain.outpoint.subscribe", json!([SH, 0, P2PKH])),
                ("blockchain.outpoint.get_status", json!([SH, 0, P2PKH])),
                ("blockchain.outpoint.unsubscribe", json!([SH, 0])),
                ("blockchain.transaction.testmempoolaccept", json!([["00"]])),
                ("mempool.recent", json!([])),
            ] {
                let e = parse_at(method, params, v).unwrap_err();
                assert_eq!(e.code(), -32601, "{v} {method}: {e}");
                assert_eq!(
                    e.to_string(),
                    format!("unknown method \"{method} (a 1.7 method; this session speaks {v})\"")
                );
            }
            assert!(parse_at("blockchain.scripthash.subscribe", json!([SH]), v).is_ok());
        }
    }

    /// protocol-changes, 1.7: the `blockchain.scripthash.*` methods are
    /// replaced, so a 1.7 session does not know them.
    #[test]
    fn scripthash_methods_end_at_1_7() {
        for method in [
            "blockchain.scripthash.get_balance",
            "blockchain.scripthash.get_history",
            "blockchain.scripthash.get_mempool",
            "blockchain.scripthash.listunspent",
            "blockchain.scripthash.subscribe",
            "blockchain.scripthash.unsubscribe",
        ] {
            assert!(parse(method, json!([SH])).is_ok(), "{method} at 1.6");
            let e = parse17(method, json!([SH])).unwrap_err();
            assert_eq!(e.code(), -32601, "{method}: {e}");
            assert!(e.to_string().contains("removed in 1.7"), "{e}");
        }
    }

    /// 1.7 keeps 1.6's `get_merkle`: the height is required (the draft's
    /// optional height went to a later version with witness proofs).
    #[test]
    fn get_merkle_needs_its_height_at_every_version() {
        for v in [ProtocolVersion::V1_6, ProtocolVersion::V1_7] {
            let e = parse_at("blockchain.transaction.get_merkle", json!([SH]), v).unwrap_err();
            assert_eq!(
                e.to_string(),
                "invalid params: height: missing required parameter"
            );
            assert_eq!(
                parse_at("blockchain.transaction.get_merkle", json!([SH, 7]), v).unwrap(),
                Request::TxGetMerkle {
                    txid: SH.parse().unwrap(),
                    height: Height(7)
                }
            );
        }
    }

    const SH: &str = "8b01df4e368ea28f8dc0423bcf7a4923e3a12d307c875e47a0cfbf90b5c39161";
    const P2PKH: &str = "76a91462e907b15cbf27d5425399ebf6f0fb50ebb88f1888ac";

    #[test]
    fn unknown_method_names_the_method() {
        let e = parse("blockchain.address.get_history", json!([])).unwrap_err();
        assert_eq!(e.code(), -32601);
        assert!(e.to_string().contains("blockchain.address.get_history"));
    }

    #[test]
    fn server_version_params() {
        let r = parse("server.version", json!(["Sparrow", ["1.4", "1.6"]])).unwrap();
        assert_eq!(
            r,
            Request::ServerVersion {
                client_name: "Sparrow".into(),
                min: "1.4".parse().unwrap(),
                max: "1.6".parse().unwrap()
            }
        );
        let r = parse(
            "server.version",
            json!({"client_name": "x", "protocol_version": "1.4.2"}),
        );
        assert!(matches!(r, Ok(Request::ServerVersion { min, max, .. }) if min == max));
        let r = parse("server.version", Value::Null).unwrap();
        assert_eq!(
            r,
            Request::ServerVersion {
                client_name: String::new(),
                min: ProtocolVersion::DEFAULT,
                max: ProtocolVersion::DEFAULT
            }
        );
        // Future clients may add arguments.
        assert!(parse("server.version", json!(["x", "1.4", {"future": 1}])).is_ok());
        for bad in [
            json!(["x", "one"]),
            json!(["x", ["1.4"]]),
            json!(["x", 1.4]),
            json!([7]),
        ] {
            assert_eq!(
                parse("server.version", bad.clone()).unwrap_err().code(),
                -32602,
                "{bad}"
            );
        }
    }

    #[test]
    fn scriptpubkey_methods_hash_the_script() {
        let r = parse17("blockchain.scriptpubkey.get_history", json!([P2PKH])).unwrap();
        let by_hash = parse(
            "blockchain.scripthash.get_history",
            json!({ "scripthash": SH }),
        );
        let (Request::Script { key: a, .. }, Ok(Request::Script { key: b, .. })) = (r, by_hash)
        else {
            panic!()
        };
        assert_eq!(a.scripthash, b.scripthash);
        assert_eq!(a.scripthash.to_string(), SH);
        assert_eq!(a.notification_method(), SCRIPTPUBKEY_SUBSCRIBE);
        assert_eq!(b.notification_method(), SCRIPTHASH_SUBSCRIBE);
        let e = parse17("blockchain.scriptpubkey.subscribe", json!(["abc"])).unwrap_err();
        assert!(e.to_string().contains("scriptpubkey"), "{e}");
        let e = parse("blockchain.scripthash.subscribe", json!([&SH[2..]])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid params: scripthash: expected 64 hex characters, got 62"
        );
        let e = parse(
            "blockchain.scripthash.get_balance",
            json!({"script_hash": SH}),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("unknown parameter \"script_hash\""),
            "{e}"
        );
    }

    #[test]
    fn outpoint_params_are_checked() {
        let txid: Txid = SH.parse().unwrap();
        let outpoint = OutPoint { txid, vout: 3 };
        let hint = ScriptHash::from_script(&hex::decode(P2PKH).unwrap());
        assert_eq!(
            parse17("blockchain.outpoint.subscribe", json!([SH, 3, P2PKH])).unwrap(),
            Request::OutpointSubscribe {
                outpoint,
                spk_hint: hint
            }
        );
        assert_eq!(
            parse17(
                "blockchain.outpoint.get_status",
                json!({"tx_hash": SH, "txout_idx": 3, "spk_hint": P2PKH}),
            )
            .unwrap(),
            Request::OutpointGetStatus {
                outpoint,
                spk_hint: hint
            }
        );
        assert_eq!(
            parse17("blockchain.outpoint.unsubscribe", json!([SH, 3])).unwrap(),
            Request::OutpointUnsubscribe { outpoint }
        );
        for (method, params, want) in [
            (
                "blockchain.outpoint.subscribe",
                json!([SH]),
                "txout_idx: missing required parameter",
            ),
            (
                "blockchain.outpoint.subscribe",
                json!([SH, 3]),
                "spk_hint: missing required parameter",
            ),
            (
                "blockchain.outpoint.get_status",
                json!({"tx_hash": SH, "txout_idx": 3}),
                "spk_hint: missing required parameter",
            ),
            (
                "blockchain.outpoint.subscribe",
                json!([SH, -1, P2PKH]),
                "txout_idx: must be a non-negative integer",
            ),
            (
                "blockchain.outpoint.get_status",
                json!([&SH[2..], 0, P2PKH]),
                "tx_hash: expected 64 hex characters, got 62",
            ),
            (
                "blockchain.outpoint.get_status",
                json!([SH, 0, "abc"]),
                "spk_hint: odd number of hex characters (3)",
            ),
            (
                "blockchain.outpoint.unsubscribe",
                json!([SH, 0, P2PKH]),
                "expected at most 2 parameters (tx_hash, txout_idx), got 3",
            ),
        ] {
            let e = parse17(method, params).unwrap_err();
            assert_eq!(e.code(), -32602, "{method}: {e}");
            assert!(e.to_string().ends_with(want), "{method}: {e}");
        }
    }

    #[test]
    fn testmempoolaccept_and_recent_params() {
        assert_eq!(
            parse17(
                "blockchain.transaction.testmempoolaccept",
                json!([["00", "ab"]])
            )
            .unwrap(),
            Request::TxTestMempoolAccept {
                raw_txs: vec!["00".into(), "ab".into()]
            }
        );
        for (params, want) in [
            (json!([[]]), "raw_txs: must not be empty"),
            (json!(["00"]), "raw_txs: must be an array of hex strings"),
            (json!([["0g"]]), "raw_txs: element 0: invalid hex character"),
            (json!([]), "raw_txs: missing required parameter"),
        ] {
            let e = parse17("blockchain.transaction.testmempoolaccept", params).unwrap_err();
            assert_eq!(e.code(), -32602, "{e}");
            assert!(e.to_string().contains(want), "{e}");
        }
        assert_eq!(
            parse17("mempool.recent", json!([])).unwrap(),
            Request::MempoolRecent
        );
        assert_eq!(
            parse17("mempool.recent", json!([10])).unwrap_err().code(),
            -32602
        );
    }

    #[test]
    fn block_and_transaction_params() {
        assert_eq!(
            parse(
                "blockchain.block.headers",
                json!({"start_height": 10, "count": 2016})
            )
            .unwrap(),
            Request::BlockHeaders {
                start_height: Height(10),
                count: 2016,
                cp_height: Height(0)
            }
        );
        let e = parse("blockchain.block.header", json!([-1])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid params: height: must be a non-negative integer"
        );
        let e = parse("blockchain.block.headers", json!([0])).unwrap_err();
        assert_eq!(
            e.to_string(),
            "invalid params: count: missing required parameter"
        );
        let r = parse(
            "blockchain.transaction.get",
            json!({"tx_hash": SH, "verbose": true}),
        );
        assert!(matches!(r, Ok(Request::TxGet { verbose: true, .. })));
        let e = parse("blockchain.transaction.get", json!([SH, 1])).unwrap_err();
        assert_eq!(e.to_string(), "invalid params: verbose: must be a boolean");
        let e = parse("blockchain.transaction.broadcast", json!(["0g"])).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("invalid params: raw_tx: invalid hex"),
            "{e}"
        );
        let e = parse("blockchain.transaction.broadcast_package", json!([[]])).unwrap_err();
        assert!(e.to_string().contains("raw_txs"), "{e}");
        let r = parse("blockchain.transaction.id_from_pos", json!([5, 1, true])).unwrap();
        assert_eq!(
            r,
            Request::TxIdFromPos {
                height: Height(5),
                tx_pos: 1,
                merkle: true
            }
        );
    }

    #[test]
    fn estimatefee_mode_is_checked_and_normalised() {
        let r = parse("blockchain.estimatefee", json!([6, "economical"])).unwrap();
        assert_eq!(
            r,
            Request::EstimateFee {
                number: 6,
                mode: Some("ECONOMICAL".into())
            }
        );
        let r = parse("blockchain.estimatefee", json!({"number": 2})).unwrap();
        assert_eq!(
            r,
            Request::EstimateFee {
                number: 2,
                mode: None
            }
        );
        let e = parse("blockchain.estimatefee", json!([6, "fast"])).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("invalid params: mode: unknown mode"),
            "{e}"
        );
    }

    #[test]
    fn no_argument_methods_reject_arguments() {
        assert_eq!(
            parse("server.banner", json!([])).unwrap(),
            Request::ServerBanner
        );
        assert_eq!(
            parse("server.banner", json!(["x"])).unwrap_err().code(),
            -32602
        );
        assert_eq!(
            parse("server.ping", json!([])).unwrap(),
            Request::ServerPing { pong_len: 0 }
        );
        assert_eq!(
            parse("server.ping", json!({"pong_len": 4, "data": "abc"})).unwrap(),
            Request::ServerPing { pong_len: 4 }
        );
        assert!(parse("server.ping", json!([0, "xyz"])).is_err());
    }
}
