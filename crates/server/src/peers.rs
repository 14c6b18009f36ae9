//! Peer discovery for public servers: the list `server.peers.subscribe`
//! answers, the checks that put a server on it, and the announcement of our
//! own public hosts. Protocol shapes (features, the list's rows) are
//! `osprey_electrum::server`'s; this module owns the connections.
//!
//! A peer is listed only while its last check passed. A check connects
//! over TCP (Tor and TLS are not spoken here) to the host's address, sends
//! `server.version` and `server.features`, and requires our genesis hash and
//! the checked host, with the port we connected to, in its `hosts` (as
//! ElectrumX's `_send_server_features`).
//!
//! Peers come from the operator (`PeerConfig::peers`, or `osprey admin
//! addpeer` while running; checked at start, or when added, and every hour; when we have public hosts, each check also sends them our
//! features with `server.add_peer`, as ElectrumX registers itself with the
//! peers it verifies) and from `server.add_peer` (only on a server with
//! public hosts). An add_peer is checked in the background, and only for a
//! host that resolves to the caller's own address (ElectrumX's
//! `on_add_peer`), so nobody can make us connect elsewhere. Everything is
//! bounded: one add_peer per calling address per ten minutes (an IPv6
//! caller's address counted by its prefix, as the per-address cap counts
//! it), four checks at a time, a hundred learned peers, one learned peer
//! per address.

use osprey_electrum::{server, PeerFeatures, PeerInfo, Peers, ProtocolVersion, PublicHost};
use serde_json::{json, Value};
use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::config::PeerConfig;
use crate::per_ip::counted_address;

/// Peers learned through add_peer kept at once (configured ones come on top).
const LEARNED_PEERS_MAX: usize = 100;
/// Checks of announced peers running at once; more add_peers get `false`.
const CHECKS_MAX: usize = 4;
/// One add_peer per calling address in this time (ElectrumX's PEER_ADD_PAUSE).
const ADD_PEER_INTERVAL: Duration = Duration::from_secs(600);
/// Calling addresses remembered for the rate limit; when all are recent,
/// further add_peers get `false` until some expire.
const RECENT_ADDS_MAX: usize = 1024;
/// Time between checks of every known peer (and announcements to the
/// configured ones).
const ROUND_INTERVAL: Duration = Duration::from_secs(3600);
/// The whole of one check: resolve, connect, two or three calls.
const CHECK_TIMEOUT: Duration = Duration::from_secs(20);
/// Longest line a peer may answer with (its features are a few hundred bytes).
const PEER_LINE_BYTES_MAX: usize = 64 * 1024;
/// Lines read while waiting for one answer (a peer may push notifications).
const LINES_PER_CALL_MAX: usize = 8;
/// Failed checks in a row after which a learned peer is forgotten.
const FAILURES_MAX: u32 = 3;

/// One known server.
struct Entry {
    /// As configured or announced.
    host: PublicHost,
    configured: bool,
    /// What we list, while its last check passed.
    verified: Option<PeerInfo>,
    failures: u32,
}

#[derive(Default)]
struct Book {
    entries: Vec<Entry>,
    /// When each address ([`counted_address`]) last called add_peer.
    recent_adds: HashMap<IpAddr, Instant>,
    checks_running: usize,
}

/// The peer list, shared by the sessions (through [`Peers`]) and the task
/// that checks peers (`run`).
pub(crate) struct PeerBook {
    book: Mutex<Book>,
    genesis_hash: String,
    /// Our `server.features`, sent with add_peer; `None` without public
    /// hosts (then nothing is announced and add_peer is refused).
    announcement: Option<Value>,
    /// The first element of our `server.version` call.
    client_name: String,
    private_peers_allowed: bool,
    /// How much of an IPv6 caller's address the rate limit counts.
    ipv6_prefix_bits: u8,
    /// Where add_peer's checks run (add_peer is called on blocking threads).
    runtime: tokio::runtime::Handle,
}

/// A handle to the peer list; what the dispatcher holds.
#[derive(Clone)]
pub(crate) struct PeerList(Arc<PeerBook>);

/// One known server, as the admin interface lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerStatus {
    pub host: PublicHost,
    /// Given in `--peers` (else learned through `server.add_peer`).
    pub configured: bool,
    /// What `server.peers.subscribe` lists of it, while its last check
    /// passed.
    pub verified: Option<PeerInfo>,
    /// Failed checks in a row.
    pub failures: u32,
}

impl PeerList {
    /// The list for a server described by `info`, with the configured
    /// peers not yet checked; add_peer's callers are told apart by
    /// [`counted_address`] with `ipv6_prefix_bits`. Must be called within
    /// the tokio runtime.
    pub fn new(
        config: &PeerConfig,
        info: &osprey_electrum::ServerInfo,
        ipv6_prefix_bits: u8,
    ) -> PeerList {
        let entries = config
            .peers
            .iter()
            .map(|host| Entry {
                host: host.clone(),
                configured: true,
                verified: None,
                failures: 0,
            })
            .collect();
        // What peers look at: hosts, versions, genesis (not silent payments,
        // which only wallets ask about).
        let announcement =
            (!info.hosts.is_empty()).then(|| server::features(info, ProtocolVersion::MIN, false));
        PeerList(Arc::new(PeerBook {
            book: Mutex::new(Book {
                entries,
                ..Book::default()
            }),
            genesis_hash: info.genesis_hash.to_string(),
            announcement,
            client_name: info.server_version.clone(),
            private_peers_allowed: config.private_peers_allowed,
            ipv6_prefix_bits,
            runtime: tokio::runtime::Handle::current(),
        }))
    }

    /// Every known server, verified or not.
    pub fn statuses(&self) -> Vec<PeerStatus> {
        self.0
            .lock()
            .entries
            .iter()
            .map(|e| PeerStatus {
                host: e.host.clone(),
                configured: e.configured,
                verified: e.verified.clone(),
                failures: e.failures,
            })
            .collect()
    }

    /// Adds `host` as the operator's peer and checks it at once (in the
    /// background); a host already known is the operator's from now on,
    /// with `host`'s ports. Returns whether it was not known yet.
    pub fn add_configured(&self, host: PublicHost) -> bool {
        let new = {
            let mut state = self.0.lock();
            match state.entries.iter_mut().find(|e| e.host.host == host.host) {
                Some(entry) => {
                    if entry.host != host {
                        entry.host = host.clone();
                        entry.verified = None;
                    }
                    entry.configured = true;
                    entry.failures = 0;
                    false
                }
                None => {
                    state.entries.push(Entry {
                        host: host.clone(),
                        configured: true,
                        verified: None,
                        failures: 0,
                    });
                    true
                }
            }
        };
        let book = Arc::clone(&self.0);
        self.0
            .runtime
            .spawn(async move { book.check_entry(host, true).await });
        new
    }

    /// Forgets every known server named `host` (configured or learned);
    /// returns them. A learned one may announce itself again.
    pub fn remove(&self, host: &str) -> Vec<PublicHost> {
        let host = host.to_ascii_lowercase();
        let mut state = self.0.lock();
        let (removed, kept) = std::mem::take(&mut state.entries)
            .into_iter()
            .partition(|e| e.host.host == host);
        state.entries = kept;
        removed.into_iter().map(|e: Entry| e.host).collect()
    }

    /// Checks every known peer now and then every `ROUND_INTERVAL`, until
    /// `stop`.
    pub async fn run(self, mut stop: watch::Receiver<bool>) {
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                () = self.0.round() => {}
            }
            tokio::select! {
                _ = stop.changed() => return,
                () = tokio::time::sleep(ROUND_INTERVAL) => {}
            }
        }
    }
}

impl Peers for PeerList {
    fn known(&self) -> Vec<PeerInfo> {
        self.0
            .lock()
            .entries
            .iter()
            .filter_map(|e| e.verified.clone())
            .collect()
    }

    fn add(&self, features: PeerFeatures, source: IpAddr) -> bool {
        let book = &self.0;
        let source = source.to_canonical();
        // Debug, not info: anyone may call add_peer, as often as they like.
        let refuse = |why: &str| {
            tracing::debug!(%source, "add_peer refused: {why}");
            false
        };
        if book.announcement.is_none() {
            return refuse("this server has no public hosts");
        }
        if !book.private_peers_allowed && !is_public(source) {
            return refuse("the caller's address is not public");
        }
        let candidates: Vec<PublicHost> = features
            .hosts
            .into_iter()
            .filter(|h| !h.is_onion() && h.tcp_port.is_some())
            .collect();
        if candidates.is_empty() {
            return refuse("no host with a TCP port");
        }
        let now = Instant::now();
        let mut state = book.lock();
        state
            .recent_adds
            .retain(|_, at| now.duration_since(*at) < ADD_PEER_INTERVAL);
        let caller = counted_address(source, book.ipv6_prefix_bits);
        if state.recent_adds.contains_key(&caller) {
            return refuse("one add_peer per address every ten minutes");
        }
        if state.recent_adds.len() >= RECENT_ADDS_MAX {
            return refuse("too many recent add_peer calls");
        }
        state.recent_adds.insert(caller, now);
        let listed = candidates.iter().any(|c| {
            state
                .entries
                .iter()
                .any(|e| e.verified.is_some() && e.host == *c)
        });
        if listed {
            return true;
        }
        if state.entries.iter().filter(|e| !e.configured).count() >= LEARNED_PEERS_MAX {
            return refuse("the peer list is full");
        }
        if state.checks_running >= CHECKS_MAX {
            return refuse("too many checks running");
        }
        state.checks_running += 1;
        drop(state);
        let book = Arc::clone(book);
        self.0.runtime.spawn(async move {
            let checked = book.check_announced(&candidates, source).await;
            let mut state = book.lock();
            state.checks_running -= 1;
            match checked {
                Ok((host, info)) => {
                    tracing::info!(peer = %host.host, %source, "announced peer checked: listed");
                    state.learn(host, info);
                }
                Err(e) => tracing::info!(%source, "announced peer not listed: {e}"),
            }
        });
        true
    }
}

impl Book {
    /// Lists a checked announced peer: updates its entry, or adds one (in
    /// place of a learned peer at the same address: one per address).
    fn learn(&mut self, host: PublicHost, info: PeerInfo) {
        if let Some(entry) = self.entries.iter_mut().find(|e| e.host.host == host.host) {
            entry.host = host;
            entry.verified = Some(info);
            entry.failures = 0;
            return;
        }
        self.entries
            .retain(|e| e.configured || e.verified.as_ref().is_none_or(|v| v.ip != info.ip));
        if self.entries.iter().filter(|e| !e.configured).count() >= LEARNED_PEERS_MAX {
            return;
        }
        self.entries.push(Entry {
            host,
            configured: false,
            verified: Some(info),
            failures: 0,
        });
    }
}

impl PeerBook {
    fn lock(&self) -> std::sync::MutexGuard<'_, Book> {
        self.book.lock().expect("peer book lock poisoned")
    }

    /// Checks every known peer once, one after the other.
    async fn round(&self) {
        let hosts: Vec<(PublicHost, bool)> = self
            .lock()
            .entries
            .iter()
            .map(|e| (e.host.clone(), e.configured))
            .collect();
        for (host, configured) in hosts {
            self.check_entry(host, configured).await;
        }
    }

    /// Checks the known peer `host` and records the outcome in its entry,
    /// if it is still known (an operator may have removed it meanwhile).
    async fn check_entry(&self, host: PublicHost, configured: bool) {
        let checked = tokio::time::timeout(CHECK_TIMEOUT, async {
            let ip = resolve(&host)
                .await?
                .into_iter()
                .next()
                .ok_or("resolves to no address")?;
            self.check(&host, ip, configured).await
        })
        .await
        .unwrap_or_else(|_| Err("timed out".into()));
        let mut state = self.lock();
        let Some(at) = state.entries.iter().position(|e| e.host == host) else {
            return;
        };
        let entry = &mut state.entries[at];
        match checked {
            Ok(info) => {
                if entry.verified.is_none() {
                    tracing::info!(peer = %host.host, ip = %info.ip, "peer checked: listed");
                }
                entry.verified = Some(info);
                entry.failures = 0;
            }
            Err(e) => {
                tracing::info!(peer = %host.host, "peer check failed: {e}");
                entry.verified = None;
                entry.failures += 1;
                if !entry.configured && entry.failures >= FAILURES_MAX {
                    tracing::info!(peer = %host.host, "forgetting an unreachable peer");
                    state.entries.remove(at);
                }
            }
        }
    }

    /// Checks the first of `candidates` that resolves to `source`.
    async fn check_announced(
        &self,
        candidates: &[PublicHost],
        source: IpAddr,
    ) -> Result<(PublicHost, PeerInfo), String> {
        tokio::time::timeout(CHECK_TIMEOUT, async {
            for host in candidates {
                let Ok(addresses) = resolve(host).await else {
                    continue;
                };
                if addresses.contains(&source) {
                    let info = self.check(host, source, false).await?;
                    return Ok((host.clone(), info));
                }
            }
            Err(format!("no announced host resolves to {source}"))
        })
        .await
        .unwrap_or_else(|_| Err("timed out".into()))
    }

    /// Connects to `host` at `ip` over TCP and checks it is a server of our
    /// chain that calls itself `host`; with `announce`, also sends it our
    /// features with add_peer.
    async fn check(
        &self,
        host: &PublicHost,
        ip: IpAddr,
        announce: bool,
    ) -> Result<PeerInfo, String> {
        let port = host.tcp_port.ok_or("no TCP port")?;
        let stream = TcpStream::connect((ip, port))
            .await
            .map_err(|e| format!("connecting to {ip}:{port}: {e}"))?;
        let mut peer = PeerConnection::new(stream);
        let version = peer
            .call(
                "server.version",
                json!([self.client_name, ProtocolVersion::MIN.to_string()]),
            )
            .await?;
        if !version
            .as_array()
            .is_some_and(|v| v.len() == 2 && v.iter().all(Value::is_string))
        {
            return Err(format!("server.version answered {version}"));
        }
        let features = PeerFeatures::parse(&peer.call("server.features", json!([])).await?)
            .map_err(|e| format!("server.features: {e}"))?;
        if features.genesis_hash != self.genesis_hash {
            return Err(format!(
                "genesis hash {} is not ours (another chain)",
                features.genesis_hash
            ));
        }
        let listed = features
            .host(&host.host)
            .cloned()
            .ok_or_else(|| format!("its hosts do not list {}", host.host))?;
        if listed.tcp_port != Some(port) {
            return Err(format!(
                "its hosts list {} with TCP port {:?}, not {port}",
                host.host, listed.tcp_port
            ));
        }
        if let Some(ours) = self.announcement.as_ref().filter(|_| announce) {
            let accepted = peer.call("server.add_peer", json!([ours])).await?;
            tracing::info!(peer = %host.host, %accepted, "announced our public hosts");
        }
        Ok(PeerInfo {
            ip,
            host: host.host.clone(),
            protocol_max: features.protocol_max,
            pruning: features.pruning,
            tcp_port: listed.tcp_port,
            ssl_port: listed.ssl_port,
        })
    }
}

/// The addresses of `host` (canonical: IPv4-mapped IPv6 as IPv4).
async fn resolve(host: &PublicHost) -> Result<Vec<IpAddr>, String> {
    let port = host.tcp_port.unwrap_or(0);
    let addresses = tokio::net::lookup_host((host.host.as_str(), port))
        .await
        .map_err(|e| format!("resolving {}: {e}", host.host))?;
    Ok(addresses.map(|a| a.ip().to_canonical()).collect())
}

/// Whether `ip` is reachable from the internet: not loopback, private,
/// link-local, shared (CGNAT), documentation or unspecified.
fn is_public(ip: IpAddr) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(v4) => {
            let [a, b, ..] = v4.octets();
            !(v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || v4.is_documentation()
                || (a == 100 && (64..128).contains(&b)))
        }
        IpAddr::V6(v6) => {
            let first = v6.segments()[0];
            !(v6.is_loopback()
                || v6.is_unspecified()
                || (first & 0xfe00) == 0xfc00
                || (first & 0xffc0) == 0xfe80
                || first == 0x2001 && v6.segments()[1] == 0x0db8)
        }
    }
}

/// An outgoing Electrum connection to a peer: one call at a time.
struct PeerConnection {
    reader: BufReader<OwnedReadHalf>,
    writer: OwnedWriteHalf,
    next_id: u64,
}

impl PeerConnection {
    fn new(stream: TcpStream) -> PeerConnection {
        let (reader, writer) = stream.into_split();
        PeerConnection {
            reader: BufReader::new(reader),
            writer,
            next_id: 0,
        }
    }

    /// Calls `method` and returns its result; a peer's error, a line over
    /// `PEER_LINE_BYTES_MAX` or a closed connection is an error.
    async fn call(&mut self, method: &str, params: Value) -> Result<Value, String> {
        self.next_id += 1;
        let id = self.next_id;
        let mut line =
            json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}).to_string();
        line.push('\n');
        self.writer
            .write_all(line.as_bytes())
            .await
            .map_err(|e| format!("{method}: {e}"))?;
        for _ in 0..LINES_PER_CALL_MAX {
            let mut buf = Vec::new();
            (&mut self.reader)
                .take(PEER_LINE_BYTES_MAX as u64 + 1)
                .read_until(b'\n', &mut buf)
                .await
                .map_err(|e| format!("{method}: {e}"))?;
            if buf.last() != Some(&b'\n') {
                return Err(if buf.len() > PEER_LINE_BYTES_MAX {
                    format!("{method}: answer longer than {PEER_LINE_BYTES_MAX} bytes")
                } else {
                    format!("{method}: connection closed")
                });
            }
            let answer: Value =
                serde_json::from_slice(&buf).map_err(|e| format!("{method}: not JSON: {e}"))?;
            if answer.get("id") != Some(&json!(id)) {
                continue; // a notification
            }
            if let Some(error) = answer.get("error") {
                return Err(format!("{method}: {error}"));
            }
            return answer
                .get("result")
                .cloned()
                .ok_or_else(|| format!("{method}: no result"));
        }
        Err(format!("{method}: no answer in {LINES_PER_CALL_MAX} lines"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn public_addresses() {
        for public in ["8.8.8.8", "203.0.114.1", "2a01:4f8::1", "::ffff:8.8.8.8"] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "192.168.0.1",
            "169.254.1.1",
            "100.64.0.1",
            "0.0.0.0",
            "203.0.113.5",
            "::1",
            "fd00::1",
            "fe80::1",
            "2001:db8::1",
            "::ffff:10.0.0.1",
        ] {
            assert!(!is_public(private.parse().unwrap()), "{private}");
        }
    }

    /// A public server's list that takes add_peers from private addresses
    /// (the callers below are documentation addresses).
    fn announcing_list(ipv6_prefix_bits: u8) -> PeerList {
        let info = osprey_electrum::ServerInfo {
            server_version: "Osprey test".into(),
            banner: String::new(),
            donation_address: String::new(),
            genesis_hash: bitcoin::constants::genesis_block(bitcoin::Network::Regtest).block_hash(),
            hosts: vec!["electrum.example.com:t50001".parse().unwrap()],
        };
        let config = PeerConfig {
            public_hosts: info.hosts.clone(),
            peers: Vec::new(),
            private_peers_allowed: true,
        };
        PeerList::new(&config, &info, ipv6_prefix_bits)
    }

    /// Features announcing a host at an IP address that is none of the
    /// callers': each add_peer is accepted, and its check fails at once
    /// without a lookup or a connection.
    fn features() -> PeerFeatures {
        PeerFeatures {
            genesis_hash: String::new(),
            hosts: vec!["192.0.2.200:t50001".parse().unwrap()],
            protocol_max: "1.4".into(),
            pruning: None,
        }
    }

    /// The operator's peers: added as configured (a learned one becomes
    /// configured, with the ports given), removed by name whatever their
    /// source. The peer at port 1 on loopback refuses the check made at
    /// once, which leaves it listed, unverified.
    #[tokio::test]
    async fn the_operator_adds_and_removes_peers() {
        let list = announcing_list(64);
        let refusing: PublicHost = "127.0.0.1:t1".parse().unwrap();
        assert!(list.add_configured(refusing.clone()));
        assert!(!list.add_configured(refusing.clone()), "known already");
        list.0.lock().learn(
            "learned.example:t50001".parse().unwrap(),
            PeerInfo {
                ip: "192.0.2.9".parse().unwrap(),
                host: "learned.example".into(),
                protocol_max: "1.4".into(),
                pruning: None,
                tcp_port: Some(50001),
                ssl_port: None,
            },
        );
        let moved: PublicHost = "learned.example:t1".parse().unwrap();
        assert!(!list.add_configured(moved.clone()));
        let statuses = list.statuses();
        assert_eq!(statuses.len(), 2);
        assert!(statuses.iter().all(|s| s.configured), "{statuses:?}");
        assert_eq!(statuses[1].host, moved);
        assert_eq!(statuses[1].verified, None, "new ports, not checked yet");
        assert_eq!(list.remove("LEARNED.example"), [moved]);
        assert_eq!(list.remove("learned.example"), []);
        assert_eq!(list.statuses().len(), 1);
        // The check of the refusing peer fails and is recorded.
        tokio::time::timeout(Duration::from_secs(10), async {
            while list.statuses()[0].failures == 0 {
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await
        .expect("the added peer is checked at once");
        assert_eq!(list.statuses()[0].verified, None);
        assert_eq!(list.remove("127.0.0.1"), [refusing]);
    }

    #[tokio::test]
    async fn add_peer_callers_are_counted_by_their_ipv6_prefix() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let list = announcing_list(64);
        assert!(list.add(features(), ip("2001:db8:1:2::1")));
        assert!(
            !list.add(features(), ip("2001:db8:1:2:ffff::2")),
            "another address of the same /64 within ten minutes"
        );
        assert!(list.add(features(), ip("2001:db8:1:3::1")), "the next /64");
        // IPv4 callers count one address each.
        assert!(list.add(features(), ip("192.0.2.1")));
        assert!(!list.add(features(), ip("::ffff:192.0.2.1")));
        // At /128, each IPv6 address is a caller of its own.
        let exact = announcing_list(128);
        assert!(exact.add(features(), ip("2001:db8:1:2::1")));
        assert!(exact.add(features(), ip("2001:db8:1:2::2")));
    }
}
