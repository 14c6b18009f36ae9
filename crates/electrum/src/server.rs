//! The `server.*` family: version, banner, features, ping, donation address,
//! peers and add_peer. Pure result shaping from the server's configuration,
//! and the reading of another server's features for peer discovery; version
//! negotiation itself lives in `session` and `version`, the peer list and
//! the connections that verify peers in `osprey-server`.

use crate::error::RpcError;
use crate::version::ProtocolVersion;
use bitcoin::BlockHash;
use serde_json::{json, Map, Value};
use std::net::IpAddr;
use std::str::FromStr;

/// What the server says about itself (from `osprey_server::ServerConfig`).
#[derive(Debug, Clone)]
pub struct ServerInfo {
    /// E.g. "Osprey 0.1.0"; the first element of `server.version`'s result.
    pub server_version: String,
    pub banner: String,
    pub donation_address: String,
    pub genesis_hash: BlockHash,
    /// Where the public can reach this server (`server.features` `hosts`);
    /// empty for a private server.
    pub hosts: Vec<PublicHost>,
}

/// A host name (or IP address) at which a server can be reached, with its
/// ports: one entry of `server.features`' `hosts`, and the operator's way to
/// name a public host or a peer, `HOST[:tPORT][:sPORT]` (the letters of
/// `server.peers.subscribe`; an IPv6 address in brackets).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublicHost {
    pub host: String,
    pub tcp_port: Option<u16>,
    pub ssl_port: Option<u16>,
}

/// Longest host name (DNS allows 253 characters).
const HOST_LEN_MAX: usize = 255;

impl FromStr for PublicHost {
    type Err = String;

    fn from_str(s: &str) -> Result<PublicHost, String> {
        let s = s.trim();
        let (host, ports) = match s.strip_prefix('[') {
            Some(rest) => {
                let (ip, ports) = rest
                    .split_once(']')
                    .ok_or_else(|| format!("{s:?}: an IPv6 address needs its closing ]"))?;
                ip.parse::<std::net::Ipv6Addr>()
                    .map_err(|_| format!("{s:?}: {ip:?} is not an IPv6 address"))?;
                (ip, ports)
            }
            None => match s.find(':') {
                Some(at) => (&s[..at], &s[at..]),
                None => (s, ""),
            },
        };
        check_host(host).map_err(|e| format!("{s:?}: {e}"))?;
        let mut public = PublicHost {
            host: host.to_ascii_lowercase(),
            tcp_port: None,
            ssl_port: None,
        };
        for part in ports.split(':').skip(1) {
            let (slot, letter) = match part.chars().next() {
                Some('t') => (&mut public.tcp_port, 't'),
                Some('s') => (&mut public.ssl_port, 's'),
                _ => return Err(format!("{s:?}: expected tPORT or sPORT, got {part:?}")),
            };
            let port: u16 = part[1..]
                .parse()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| format!("{s:?}: {part:?} is not {letter} and a port"))?;
            if slot.replace(port).is_some() {
                return Err(format!("{s:?}: two {letter} ports"));
            }
        }
        if public.tcp_port.is_none() && public.ssl_port.is_none() {
            return Err(format!(
                "{s:?}: give at least one port, e.g. {host}:t50001:s50002"
            ));
        }
        Ok(public)
    }
}

/// Checks a host name or IP address as announced by a peer or configured.
fn check_host(host: &str) -> Result<(), String> {
    if host.is_empty() {
        return Err("empty host".into());
    }
    if host.len() > HOST_LEN_MAX {
        return Err(format!("host longer than {HOST_LEN_MAX} characters"));
    }
    if host.parse::<IpAddr>().is_ok() {
        return Ok(());
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    };
    if !host.split('.').all(label_ok) {
        return Err(format!("{host:?} is not a host name or IP address"));
    }
    Ok(())
}

impl PublicHost {
    /// The `hosts` value of this host: its ports, an absent one omitted
    /// (the spec allows omitting or null).
    fn ports_json(&self) -> Value {
        let mut ports = Map::new();
        if let Some(port) = self.tcp_port {
            ports.insert("tcp_port".into(), port.into());
        }
        if let Some(port) = self.ssl_port {
            ports.insert("ssl_port".into(), port.into());
        }
        Value::Object(ports)
    }

    /// Whether the host is a Tor onion address (which we do not reach).
    pub fn is_onion(&self) -> bool {
        self.host.ends_with(".onion")
    }
}

/// One verified peer, as `server.peers.subscribe` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerInfo {
    /// The address we verified it at.
    pub ip: IpAddr,
    pub host: String,
    /// Its `protocol_max`.
    pub protocol_max: String,
    /// Its pruning limit; `None` when it does not prune.
    pub pruning: Option<u64>,
    pub tcp_port: Option<u16>,
    pub ssl_port: Option<u16>,
}

/// What a server says about itself in `server.features` (and sends with
/// `server.add_peer`), as far as peer discovery needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PeerFeatures {
    pub genesis_hash: String,
    /// Its hosts, by name (serde_json keeps objects sorted); malformed
    /// entries are left out.
    pub hosts: Vec<PublicHost>,
    pub protocol_max: String,
    pub pruning: Option<u64>,
}

/// Host entries of a peer's features looked at (a server normally has one
/// or two: clearnet and Tor).
const PEER_HOSTS_MAX: usize = 8;

impl PeerFeatures {
    /// Reads a `server.features` result.
    ///
    /// # Errors
    /// A message naming what is missing or malformed.
    pub fn parse(features: &Value) -> Result<PeerFeatures, String> {
        let object = features.as_object().ok_or("features are not an object")?;
        let genesis_hash = object
            .get("genesis_hash")
            .and_then(Value::as_str)
            .filter(|g| g.len() == 64 && g.bytes().all(|b| b.is_ascii_hexdigit()))
            .ok_or("no genesis_hash")?
            .to_ascii_lowercase();
        let hosts = object
            .get("hosts")
            .and_then(Value::as_object)
            .ok_or("no hosts object")?
            .iter()
            .take(PEER_HOSTS_MAX)
            .filter_map(|(host, ports)| {
                let port = |key: &str| {
                    ports
                        .get(key)
                        .and_then(Value::as_u64)
                        .and_then(|p| u16::try_from(p).ok())
                        .filter(|p| *p != 0)
                };
                check_host(host).ok()?;
                Some(PublicHost {
                    host: host.to_ascii_lowercase(),
                    tcp_port: port("tcp_port"),
                    ssl_port: port("ssl_port"),
                })
            })
            .collect();
        let protocol_max = object
            .get("protocol_max")
            .and_then(Value::as_str)
            .filter(|v| {
                !v.is_empty() && v.len() <= 16 && v.bytes().all(|b| b.is_ascii_digit() || b == b'.')
            })
            .ok_or("no protocol_max")?
            .to_string();
        let pruning = object
            .get("pruning")
            .and_then(Value::as_u64)
            .filter(|p| *p > 0);
        Ok(PeerFeatures {
            genesis_hash,
            hosts,
            protocol_max,
            pruning,
        })
    }

    /// The entry of `hosts` named `host` (case-insensitive).
    pub fn host(&self, host: &str) -> Option<&PublicHost> {
        self.hosts
            .iter()
            .find(|h| h.host.eq_ignore_ascii_case(host))
    }
}

/// The peer list and the verification of announced peers, kept by the
/// server (`osprey-server`), asked by `server.peers.subscribe` and
/// `server.add_peer`. Must not block: `add` only queues a verification.
pub trait Peers: Send + Sync {
    /// The verified peers.
    fn known(&self) -> Vec<PeerInfo>;
    /// `server.add_peer` from a client at `source`: whether the peer was
    /// tentatively accepted (queued for verification, or known already).
    fn add(&self, features: PeerFeatures, source: IpAddr) -> bool;
}

/// Returns `server.version`'s result: `[server_software_version, protocol_version]`.
pub fn version(info: &ServerInfo, negotiated: ProtocolVersion) -> Value {
    json!([info.server_version, negotiated.to_string()])
}

/// Returns `server.features`. `hosts` lists the public hosts; a private
/// server (none configured) sends `{}`: the key is mandatory, and an empty
/// dictionary claims no route, so no peer will list us (as ElectrumX does
/// without REPORT_SERVICES; guessing a local address, as Fulcrum does,
/// would advertise one that is wrong behind NAT). 1.7 drops
/// `hash_function` (a script is named by its script, and "the
/// notifications use script hash", always sha256); the draft's
/// `method_flavours` was postponed and is not part of 1.7.
/// `silent_payments` adds Frigate's key, `"silent_payments": [0]` (the
/// BIP-352 protocol versions served), at every version: Sparrow asks for
/// it before it calls `blockchain.silentpayments.*`.
pub fn features(info: &ServerInfo, protocol: ProtocolVersion, silent_payments: bool) -> Value {
    let hosts: Map<String, Value> = info
        .hosts
        .iter()
        .map(|h| (h.host.clone(), h.ports_json()))
        .collect();
    let mut features = json!({
        "genesis_hash": info.genesis_hash.to_string(),
        "hosts": hosts,
        "protocol_max": ProtocolVersion::MAX.to_string(),
        "protocol_min": ProtocolVersion::MIN.to_string(),
        "pruning": null,
        "server_version": info.server_version,
    });
    if !protocol.is_1_7_or_later() {
        features["hash_function"] = json!("sha256");
    }
    if silent_payments {
        features["silent_payments"] = json!([0]);
    }
    features
}

/// Returns `server.ping`'s result: `null` up to 1.6; from 1.7 on,
/// `{"data": ...}` holding `pong_len` characters of padding (1.7 pads both
/// ways against traffic analysis; the `data` a client sends is padding,
/// checked to be hex and dropped).
///
/// # Errors
/// `InvalidParams` when `pong_len` is above `pong_len_max`.
pub fn ping(
    protocol: ProtocolVersion,
    pong_len: u32,
    pong_len_max: usize,
) -> Result<Value, RpcError> {
    if !protocol.is_1_7_or_later() {
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

/// Returns `server.peers.subscribe`'s result: `[ip, host, features]` per
/// peer, the features being `v` and the maximum protocol version, `p` and
/// the pruning limit when it prunes, `t` and `s` with their ports (always
/// written out: a bare letter would mean the network's default port).
pub fn peers(peers: &[PeerInfo]) -> Value {
    peers
        .iter()
        .map(|peer| {
            let mut features = vec![format!("v{}", peer.protocol_max)];
            features.extend(peer.pruning.map(|p| format!("p{p}")));
            features.extend(peer.tcp_port.map(|p| format!("t{p}")));
            features.extend(peer.ssl_port.map(|p| format!("s{p}")));
            json!([peer.ip.to_string(), peer.host, features])
        })
        .collect()
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
            hosts: Vec::new(),
        }
    }

    #[test]
    fn features_have_every_mandatory_key() {
        let f17 = features(&info(), ProtocolVersion::V1_7, false);
        let f = features(&info(), ProtocolVersion::V1_6, false);
        assert_eq!(f17.get("hash_function"), None, "gone in 1.7");
        assert_eq!(f17.get("method_flavours"), None, "not part of 1.7");
        let mut without_hash_function = f.clone();
        without_hash_function
            .as_object_mut()
            .unwrap()
            .remove("hash_function");
        assert_eq!(f17, without_hash_function, "otherwise the same");
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
        assert_eq!(f.get("silent_payments"), None);
        for protocol in [ProtocolVersion::V1_6, ProtocolVersion::V1_7] {
            let with = features(&info(), protocol, true);
            assert_eq!(with["silent_payments"], json!([0]));
            let mut without = with.clone();
            without.as_object_mut().unwrap().remove("silent_payments");
            assert_eq!(without, features(&info(), protocol, false));
        }
    }

    #[test]
    fn public_hosts_parse_from_the_peer_list_letters() {
        let host = |s: &str| s.parse::<PublicHost>();
        assert_eq!(
            host("Electrum.Example.com:t50001:s50002"),
            Ok(PublicHost {
                host: "electrum.example.com".into(),
                tcp_port: Some(50001),
                ssl_port: Some(50002)
            })
        );
        assert_eq!(
            host(" 203.0.113.7:s995 "),
            Ok(PublicHost {
                host: "203.0.113.7".into(),
                tcp_port: None,
                ssl_port: Some(995)
            })
        );
        assert_eq!(
            host("[2001:db8::1]:t50001"),
            Ok(PublicHost {
                host: "2001:db8::1".into(),
                tcp_port: Some(50001),
                ssl_port: None
            })
        );
        for (bad, why) in [
            ("example.com", "give at least one port"),
            ("example.com:50001", "expected tPORT or sPORT"),
            ("example.com:t", "is not t and a port"),
            ("example.com:t0", "is not t and a port"),
            ("example.com:t70000", "is not t and a port"),
            ("example.com:t1:t2", "two t ports"),
            (":t50001", "empty host"),
            ("exa mple.com:t1", "not a host name"),
            ("[2001:db8::1:t1", "closing ]"),
            ("[example.com]:t1", "not an IPv6 address"),
        ] {
            let e = host(bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn peer_features_keep_what_peering_needs() {
        let f = PeerFeatures::parse(&json!({
            "genesis_hash": "0F9188F13CB7B2C71F2A335E3A4FC328BF5BEB436012AFCA590B1A11466E2206",
            "hosts": {
                "a.example": {"tcp_port": 50001, "ssl_port": 50002},
                "b.example": {"tcp_port": "50001", "ssl_port": 0},
                "not a host": {"tcp_port": 1},
            },
            "protocol_max": "1.4.2",
            "pruning": 0,
        }))
        .unwrap();
        assert_eq!(
            f.genesis_hash,
            "0f9188f13cb7b2c71f2a335e3a4fc328bf5beb436012afca590b1a11466e2206"
        );
        assert_eq!(f.hosts.len(), 2);
        assert_eq!(f.host("A.example").unwrap().ssl_port, Some(50002));
        let b = f.host("b.example").unwrap();
        assert_eq!((b.tcp_port, b.ssl_port), (None, None));
        assert_eq!(f.protocol_max, "1.4.2");
        assert_eq!(f.pruning, None);
        for (bad, why) in [
            (json!([]), "not an object"),
            (json!({"hosts": {}, "protocol_max": "1.4"}), "genesis_hash"),
            (json!({"genesis_hash": "ab", "hosts": {}}), "genesis_hash"),
            (
                json!({"genesis_hash": "00".repeat(32), "protocol_max": "1.4"}),
                "hosts",
            ),
            (
                json!({"genesis_hash": "00".repeat(32), "hosts": {}, "protocol_max": "x"}),
                "protocol_max",
            ),
        ] {
            let e = PeerFeatures::parse(&bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn ping_is_null_until_1_7() {
        let v14: ProtocolVersion = "1.4.2".parse().unwrap();
        assert_eq!(ping(v14, 5, 10).unwrap(), Value::Null);
        assert_eq!(ping(ProtocolVersion::V1_6, 5, 10).unwrap(), Value::Null);
        let v17 = ProtocolVersion::V1_7;
        assert_eq!(ping(v17, 0, 10).unwrap(), json!({"data": ""}));
        assert_eq!(ping(v17, 4, 10).unwrap(), json!({"data": "0000"}));
        assert_eq!(ping(v17, 11, 10).unwrap_err().code(), -32602);
        assert_eq!(
            version(&info(), ProtocolVersion::V1_6),
            json!(["Osprey 0.1.0", "1.6"])
        );
    }
}
