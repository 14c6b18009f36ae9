//! The server's configuration: where to listen, what to say about itself,
//! and every limit that keeps a client from using unbounded memory or CPU.
//! Plain structs: the binary fills them from its own config layers, and
//! takes the defaults from here.

pub use crate::per_ip::Subnet;
use crate::tls::TlsFiles;
use osprey_core::Network;
use osprey_electrum::PublicHost;
use std::net::SocketAddr;

/// Everything `serve` needs besides the backend.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// Where wallets connect over TCP, newline-framed (Electrum's `t`).
    pub electrum_rpc_addr: SocketAddr,
    /// The same over TLS (Electrum's `s`), if anywhere.
    pub electrum_tls_addr: Option<SocketAddr>,
    /// One JSON-RPC message per WebSocket message (browser wallets).
    pub electrum_ws_addr: Option<SocketAddr>,
    /// The same over TLS.
    pub electrum_wss_addr: Option<SocketAddr>,
    /// Certificate and key of the TLS and WSS listeners (needed by either).
    pub tls: Option<TlsFiles>,
    pub network: Network,
    /// Answer of `server.banner`.
    pub banner: String,
    /// Answer of `server.donation_address` (may be empty).
    pub donation_address: String,
    /// First element of `server.version`'s answer, e.g. "Osprey 0.1.0".
    pub server_version: String,
    pub limits: Limits,
    pub peering: PeerConfig,
}

/// Peer discovery, for public servers. All empty (the default): a private
/// server, which reports no hosts, lists no peers and refuses add_peer.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PeerConfig {
    /// Where the public reaches this server: `server.features` `hosts`, and
    /// what is announced to `peers` (their add_peer checks the first of
    /// these, by name, with a TCP port). Empty: a private server.
    pub public_hosts: Vec<PublicHost>,
    /// Peers the operator names: checked at start and every hour, listed
    /// in `server.peers.subscribe` while they pass, and announced to when
    /// `public_hosts` is set. Each needs a TCP port (checks use TCP).
    pub peers: Vec<PublicHost>,
    /// Whether `server.add_peer` may add a server at a loopback or private
    /// address. Off for real servers: such a peer helps no wallet, and it
    /// would let a host on the LAN have us probe the LAN. Tests on
    /// 127.0.0.1 turn it on.
    pub private_peers_allowed: bool,
}

/// Per-connection and global limits. Exceeding one gets a JSON-RPC error
/// (see `osprey_electrum::error` for codes) and the session goes on, except
/// for `sessions_max` (the idlest session makes room, or the extra
/// connection is told and closed), the idle and write timeouts, and a full
/// outgoing queue (the session is closed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Limits {
    /// Longest request line in bytes, newline excluded. Default 1,000,000:
    /// room for a package at the node's limit (101 kvB, twice that as hex)
    /// or a full batch. A longer line gets a -101 error (id null), is
    /// discarded up to its newline, and the session continues.
    pub line_bytes_max: usize,
    /// Longest response line in bytes (ElectrumX's MAX_SEND). Default
    /// 8,000,000 (Fulcrum's default buffer): a 2,016-header chunk is
    /// ~330 kB and a 100,000-entry history ~9 MB. A larger answer gets a
    /// -101 error per request, so a client that stops reading holds at
    /// most this much of the server's memory.
    pub reply_bytes_max: usize,
    /// Most requests in one batch. Default 200 (wallets send 10-100); none
    /// of a larger batch runs, each of its requests gets -101 under its own
    /// id.
    pub batch_requests_max: usize,
    /// Most script subscriptions one session may hold. Default 50,000 (a
    /// large wallet with many gap-limit addresses fits easily); beyond, the
    /// subscribe gets -101.
    pub subscriptions_per_session_max: usize,
    /// Most concurrent sessions. Default 1,000; an extra connection takes
    /// the place of an idle session (see `shed_idle_secs`), or gets a -102
    /// "server busy" error line and is closed.
    pub sessions_max: usize,
    /// `max` of `blockchain.block.headers`. Default 2016 (one retarget
    /// period, the spec's recommended minimum); must be at least 2016.
    pub headers_per_call_max: usize,
    /// When `sessions_max` sessions are connected, a newcomer takes the
    /// place of a connection that has sent nothing at all for 5 s
    /// (`activity::SILENT_GRACE`), else of the session idle the longest if
    /// that one has sent nothing for this long; otherwise it is refused.
    /// Default 60.
    pub shed_idle_secs: u64,
    /// A session that sends nothing for this long is closed. Default 600
    /// (the spec's "roughly 10 minutes"; wallets ping more often).
    pub idle_timeout_secs: u64,
    /// A write that cannot finish in this long closes the session (a client
    /// that stopped reading). Default 60.
    pub write_timeout_secs: u64,
    /// Notifications queued for one session before it is judged too slow
    /// and disconnected, rather than buffered without bound. Default 10,000.
    pub outgoing_queue_max: usize,
    /// Bytes all sessions together may make the server hold: incomplete
    /// request lines, responses and notifications not yet taken by their
    /// client, and script subscriptions (256 bytes each). What would pass
    /// it is refused with a -102 "server busy" error (an incomplete line
    /// or a notification: the session is closed), so greedy or stalled
    /// clients cannot take the server's memory.
    /// Subscriptions leave `line_bytes_max + reply_bytes_max` of it free,
    /// so that requests can always be read and answered. Default 512 MiB;
    /// at least twice `line_bytes_max + reply_bytes_max`.
    pub client_memory_bytes_max: usize,
    /// Most concurrent sessions from one IP address (an IPv6 one counted
    /// by its `ipv6_prefix_bits` network). Default 12 (Fulcrum's
    /// `max_clients_per_ip`: a wallet opens one, a NAT shares a few); an
    /// extra connection gets a -102 error line and is closed. Addresses in
    /// `trusted_subnets` are exempt.
    pub sessions_per_ip_max: usize,
    /// Client addresses left out of the per-address cap: a Tor daemon or
    /// reverse proxy connects from there on behalf of every client behind
    /// it. Default 127.0.0.1/32 and ::1/128 (Fulcrum's default
    /// `subnets_to_exclude_from_per_ip_limits`); a node package whose Tor
    /// runs in another container names that container's network.
    pub trusted_subnets: Vec<Subnet>,
    /// Where a load balancer speaking the PROXY protocol (v1 or v2, as
    /// HAProxy's `send-proxy` and `send-proxy-v2`) connects from. A
    /// connection from there must start with a header, on every listener,
    /// and is then taken to come from the client the header names (for
    /// the per-address cap, add_peer's rate limit and the logs); without
    /// one it is closed. From anywhere else a header closes the connection.
    /// Default: none.
    pub proxy_protocol_from: Vec<Subnet>,
    /// How much of an IPv6 address names one client for the per-address
    /// cap and add_peer's rate limit: its first this many bits. Default 64
    /// (a host is usually given a whole /64); 32 to 128. IPv4 addresses,
    /// also IPv4-mapped ones, count one by one.
    pub ipv6_prefix_bits: u8,
    /// Cores the server may keep busy: request handlers in hand at once
    /// (`HANDLER_SLOTS_PER_CORE` each), batch threads, and how many lines
    /// may run before batches stop being spread over them (see `fair`).
    /// Default: the cores this process may use.
    pub worker_threads: usize,
    /// Labels one silent-payments subscription may scan besides the change
    /// label. Default 10 (Frigate's `maxLabels`); each costs a point
    /// addition per scanned record (≈ 4% of the scan kernel).
    pub sp_labels_max: usize,
    /// Silent-payment addresses one connection may subscribe. Default 10
    /// (Sparrow subscribes one per wallet); beyond, the subscribe gets
    /// -32602, as from Frigate.
    pub sp_subscriptions_per_session_max: usize,
    /// The CPU priority of silent-payment scans' point multiplications.
    /// Default `Idle` (`SCHED_IDLE`, with a floor at nice 19 when starved);
    /// what each costs: `docs/silent-payments.md`, "Scheduling".
    pub sp_scan_priority: crate::ScanPriority,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            line_bytes_max: 1_000_000,
            reply_bytes_max: 8_000_000,
            batch_requests_max: 200,
            subscriptions_per_session_max: 50_000,
            sessions_max: 1_000,
            headers_per_call_max: 2016,
            shed_idle_secs: 60,
            idle_timeout_secs: 600,
            write_timeout_secs: 60,
            outgoing_queue_max: 10_000,
            client_memory_bytes_max: 512 << 20,
            sessions_per_ip_max: 12,
            trusted_subnets: Subnet::LOOPBACK.to_vec(),
            proxy_protocol_from: Vec::new(),
            ipv6_prefix_bits: 64,
            worker_threads: std::thread::available_parallelism().map_or(1, usize::from),
            sp_labels_max: 10,
            sp_subscriptions_per_session_max: 10,
            sp_scan_priority: crate::ScanPriority::Idle,
        }
    }
}

/// Why a configuration cannot be served.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("limit {name} must be at least {min}, got {value}")]
    TooSmall {
        name: &'static str,
        min: u64,
        value: u64,
    },
    #[error("limit {name} must be at most {max}, got {value}")]
    TooLarge {
        name: &'static str,
        max: u64,
        value: u64,
    },
}

impl Limits {
    /// Checks every limit, so a bad value fails at startup, not on a client.
    ///
    /// # Errors
    /// `TooSmall` or `TooLarge` naming the first limit out of its range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let checks: [(&'static str, u64, u64); 15] = [
            ("line_bytes_max", 1024, self.line_bytes_max as u64),
            // Room for the largest answer of all: 2,016 headers as hex.
            ("reply_bytes_max", 1 << 20, self.reply_bytes_max as u64),
            ("batch_requests_max", 1, self.batch_requests_max as u64),
            (
                "subscriptions_per_session_max",
                1,
                self.subscriptions_per_session_max as u64,
            ),
            ("sessions_max", 1, self.sessions_max as u64),
            (
                "headers_per_call_max",
                2016,
                self.headers_per_call_max as u64,
            ),
            ("shed_idle_secs", 1, self.shed_idle_secs),
            ("idle_timeout_secs", 1, self.idle_timeout_secs),
            ("write_timeout_secs", 1, self.write_timeout_secs),
            ("outgoing_queue_max", 1, self.outgoing_queue_max as u64),
            (
                "client_memory_bytes_max",
                2 * (self.line_bytes_max as u64 + self.reply_bytes_max as u64),
                self.client_memory_bytes_max as u64,
            ),
            ("sessions_per_ip_max", 1, self.sessions_per_ip_max as u64),
            ("worker_threads", 1, self.worker_threads as u64),
            (
                "sp_subscriptions_per_session_max",
                1,
                self.sp_subscriptions_per_session_max as u64,
            ),
            // Shorter prefixes would count a whole provider as one client.
            ("ipv6_prefix_bits", 32, u64::from(self.ipv6_prefix_bits)),
        ];
        for (name, min, value) in checks {
            if value < min {
                return Err(ConfigError::TooSmall { name, min, value });
            }
        }
        if self.ipv6_prefix_bits > 128 {
            return Err(ConfigError::TooLarge {
                name: "ipv6_prefix_bits",
                max: 128,
                value: u64::from(self.ipv6_prefix_bits),
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_small_values_are_named() {
        assert_eq!(Limits::default().validate(), Ok(()));
        let limits = Limits {
            headers_per_call_max: 100,
            ..Limits::default()
        };
        assert_eq!(
            limits.validate(),
            Err(ConfigError::TooSmall {
                name: "headers_per_call_max",
                min: 2016,
                value: 100
            })
        );
        let limits = Limits {
            sessions_max: 0,
            ..Limits::default()
        };
        assert!(limits
            .validate()
            .unwrap_err()
            .to_string()
            .contains("sessions_max"));
        for (bits, valid) in [
            (31, false),
            (32, true),
            (64, true),
            (128, true),
            (129, false),
        ] {
            let limits = Limits {
                ipv6_prefix_bits: bits,
                ..Limits::default()
            };
            assert_eq!(limits.validate().is_ok(), valid, "ipv6_prefix_bits {bits}");
        }
    }
}
