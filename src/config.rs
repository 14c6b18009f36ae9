//! The one `Config`: per-network defaults, overridden by the TOML file, then
//! by `OSPREY_*` environment variables, then by flags. Raw input is parsed
//! here and validated into the types the program runs on, so a typo fails
//! at startup with a message naming the key.
//!
//! Every setting is declared once, as a field of [`ConfigArgs`]: its flag,
//! its environment variable and its TOML key (the same struct is what the
//! file deserializes into) all come from that field. Defaults of limits
//! come from the crates that enforce them (`Limits`, `QueryConfig`,
//! `StoreConfig`). A test checks that the README's table says the same.

use anyhow::{bail, Context};
use clap::Args;
use osprey_core::Network;
use serde::Deserialize;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

/// Flags of `osprey serve` and `osprey index`; each can also be set as an
/// `OSPREY_<NAME>` environment variable or in the TOML config file, whose
/// keys are these fields' names.
#[derive(Args, Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct ConfigArgs {
    /// TOML config file [default: ./osprey.toml if it exists]
    #[arg(long, env = "OSPREY_CONF")]
    #[serde(skip)]
    pub conf: Option<PathBuf>,
    /// bitcoin, testnet, testnet4, signet or regtest [default: bitcoin]
    #[arg(long, env = "OSPREY_NETWORK")]
    pub network: Option<String>,
    /// Where the index lives (a sub-directory per network is used) [default: ./db]
    #[arg(long, env = "OSPREY_DB_DIR")]
    pub db_dir: Option<PathBuf>,
    /// The node's data directory, to find its cookie file [default: ~/.bitcoin]
    #[arg(long, env = "OSPREY_DAEMON_DIR")]
    pub daemon_dir: Option<PathBuf>,
    /// The node's JSON-RPC address [default: 127.0.0.1:<network's RPC port>]
    #[arg(long, env = "OSPREY_DAEMON_RPC_ADDR")]
    pub daemon_rpc_addr: Option<String>,
    /// The node's cookie file [default: <daemon-dir>/<network>/.cookie]
    #[arg(long, env = "OSPREY_COOKIE_FILE")]
    pub cookie_file: Option<PathBuf>,
    /// USER:PASSWORD for the node's JSON-RPC (prefer the cookie file, the
    /// config file or OSPREY_AUTH: flags show up in `ps`)
    #[arg(long, env = "OSPREY_AUTH", hide_env_values = true)]
    pub auth: Option<String>,
    /// Index `blk*.dat` files from this directory instead of asking a node
    /// (generated chains; no mempool, no broadcast)
    #[arg(long, env = "OSPREY_BLOCKS_DIR")]
    pub blocks_dir: Option<PathBuf>,
    /// Where a node's blocks come from: auto, files, rest or rpc [default: auto]
    #[arg(long, env = "OSPREY_BLOCK_SOURCE")]
    pub block_source: Option<String>,
    /// Where Electrum clients connect [default: 127.0.0.1:<network's Electrum port>]
    #[arg(long, env = "OSPREY_ELECTRUM_RPC_ADDR")]
    pub electrum_rpc_addr: Option<String>,
    /// Log filter, e.g. `info` or `osprey=debug,info` [default: info]
    #[arg(long, env = "OSPREY_LOG_FILTER")]
    pub log_filter: Option<String>,
    /// Delete the index and build it again
    #[arg(long, env = "OSPREY_REINDEX")]
    #[serde(skip)]
    pub reindex: bool,
    /// History rows a script may have before queries about it are refused
    /// with "history too large" [default: 500000]
    #[arg(long, env = "OSPREY_HISTORY_ENTRIES_MAX")]
    pub history_entries_max: Option<usize>,
    /// Longest request line in bytes [default: 1000000]
    #[arg(long, env = "OSPREY_LINE_BYTES_MAX")]
    pub line_bytes_max: Option<usize>,
    /// Longest response line in bytes; a larger answer is refused with an
    /// error [default: 8000000]
    #[arg(long, env = "OSPREY_REPLY_BYTES_MAX")]
    pub reply_bytes_max: Option<usize>,
    /// Requests in one JSON-RPC batch [default: 200]
    #[arg(long, env = "OSPREY_BATCH_REQUESTS_MAX")]
    pub batch_requests_max: Option<usize>,
    /// Script-hash subscriptions per session [default: 50000]
    #[arg(long, env = "OSPREY_SUBSCRIPTIONS_PER_SESSION_MAX")]
    pub subscriptions_per_session_max: Option<usize>,
    /// Concurrent client sessions [default: 1000]
    #[arg(long, env = "OSPREY_SESSIONS_MAX")]
    pub sessions_max: Option<usize>,
    /// Blocks below the tip that can be undone without a reindex [default: 1000]
    #[arg(long, env = "OSPREY_REORG_DEPTH_MAX")]
    pub reorg_depth_max: Option<u32>,
    /// How often to poll the node for new blocks and mempool changes [default: 1000]
    #[arg(long, env = "OSPREY_POLL_INTERVAL_MS")]
    pub poll_interval_ms: Option<u64>,
    /// Text of server.banner [default: "Welcome to Osprey"]
    #[arg(long, env = "OSPREY_BANNER")]
    pub banner: Option<String>,
    /// Bytes all clients together may make the server hold (incomplete
    /// requests, unread responses and notifications, subscriptions at 256
    /// bytes each); past it, requests get a "server busy" error
    /// [default: 536870912]
    #[arg(long, env = "OSPREY_CLIENT_MEMORY_BYTES_MAX")]
    pub client_memory_bytes_max: Option<usize>,
    /// Where the public reaches this server, comma-separated
    /// HOST:tPORT:sPORT (either port may be left out), e.g.
    /// electrum.example.com:t50001:s50002; reported in server.features and
    /// announced to --peers. Unset: a private server
    #[arg(long, env = "OSPREY_PUBLIC_HOSTS")]
    pub public_hosts: Option<String>,
    /// Servers to list in server.peers.subscribe once checked (and to
    /// announce --public-hosts to), comma-separated HOST:tPORT[:sPORT]
    #[arg(long, env = "OSPREY_PEERS")]
    pub peers: Option<String>,
    /// Concurrent sessions from one IP address; addresses in
    /// --trusted-subnets are exempt [default: 12]
    #[arg(long, env = "OSPREY_SESSIONS_PER_IP_MAX")]
    pub sessions_per_ip_max: Option<usize>,
    /// Client networks exempt from --sessions-per-ip-max, comma-separated
    /// CIDR, e.g. a Tor container's 10.21.0.0/16 (giving a list replaces
    /// the default) [default: 127.0.0.1/32,::1/128]
    #[arg(long, env = "OSPREY_TRUSTED_SUBNETS")]
    pub trusted_subnets: Option<String>,
    /// Threads that index and answer wallets [default: the cores available]
    #[arg(long, env = "OSPREY_WORKER_THREADS")]
    pub worker_threads: Option<usize>,
    /// RocksDB's block cache in MiB: more keeps more of the index in memory
    /// for wallets' lookups [default: 256]
    #[arg(long, env = "OSPREY_DB_CACHE_MB")]
    pub db_cache_mb: Option<usize>,
    /// Rebuild the index by itself when it was written in another format
    /// (after an upgrade or a downgrade); false: refuse to start instead
    /// [default: true]
    #[arg(long, env = "OSPREY_REINDEX_ON_FORMAT_CHANGE")]
    pub reindex_on_format_change: Option<bool>,
    /// Where Electrum clients connect over TLS, e.g. 0.0.0.0:50002 (off unless set)
    #[arg(long, env = "OSPREY_ELECTRUM_TLS_ADDR")]
    pub electrum_tls_addr: Option<String>,
    /// PEM certificate chain of the TLS listeners, reloaded when the file
    /// changes [default: <db-dir>/tls-cert.pem, self-signed]
    #[arg(long, env = "OSPREY_TLS_CERT_FILE")]
    pub tls_cert_file: Option<PathBuf>,
    /// PEM private key of that certificate [default: <db-dir>/tls-key.pem, self-signed]
    #[arg(long, env = "OSPREY_TLS_KEY_FILE")]
    pub tls_key_file: Option<PathBuf>,
    /// Where browser wallets connect over WebSocket, e.g. 0.0.0.0:50003 (off unless set)
    #[arg(long, env = "OSPREY_ELECTRUM_WS_ADDR")]
    pub electrum_ws_addr: Option<String>,
    /// Where browser wallets connect over WebSocket with TLS, e.g.
    /// 0.0.0.0:50004 (off unless set)
    #[arg(long, env = "OSPREY_ELECTRUM_WSS_ADDR")]
    pub electrum_wss_addr: Option<String>,
    /// Serve Prometheus metrics at http://IP:PORT/metrics, e.g.
    /// 127.0.0.1:4224 (electrs' port) [default: off]
    #[arg(long, env = "OSPREY_MONITORING_ADDR")]
    pub monitoring_addr: Option<String>,
}

/// Where the chain comes from.
#[derive(Clone, Debug)]
pub enum ChainConfig {
    Node {
        rpc_addr: String,
        auth: osprey_chain::rpc::Auth,
        block_source: osprey_chain::BlockSourceChoice,
        /// The node's `blocks` directory, for the `files` block source.
        blocks_dir: Option<PathBuf>,
    },
    BlkFiles {
        dir: PathBuf,
    },
}

/// The validated configuration the program runs on.
#[derive(Clone, Debug)]
pub struct Config {
    pub network: Network,
    /// The network's own directory inside `--db-dir`.
    pub db_path: PathBuf,
    pub chain: ChainConfig,
    pub electrum_rpc_addr: SocketAddr,
    pub log_filter: String,
    pub reindex: bool,
    pub history_entries_max: usize,
    pub line_bytes_max: usize,
    pub reply_bytes_max: usize,
    pub batch_requests_max: usize,
    pub subscriptions_per_session_max: usize,
    pub sessions_max: usize,
    pub reorg_depth_max: u32,
    pub poll_interval_ms: u64,
    pub banner: String,
    pub client_memory_bytes_max: usize,
    pub public_hosts: Vec<osprey_server::PublicHost>,
    pub peers: Vec<osprey_server::PublicHost>,
    pub sessions_per_ip_max: usize,
    pub trusted_subnets: Vec<osprey_server::Subnet>,
    pub worker_threads: usize,
    /// RocksDB's block cache.
    pub db_cache_bytes: usize,
    pub reindex_on_format_change: bool,
    pub electrum_tls_addr: Option<SocketAddr>,
    pub electrum_ws_addr: Option<SocketAddr>,
    pub electrum_wss_addr: Option<SocketAddr>,
    /// Certificate and key of the TLS listeners; `None` without one.
    pub tls: Option<osprey_server::TlsFiles>,
    /// Where `/metrics` is served; `None`: nowhere.
    pub monitoring_addr: Option<SocketAddr>,
}

impl ConfigArgs {
    /// Layers flags and environment over the config file over defaults.
    ///
    /// # Errors
    /// A missing or malformed config file, an unknown key, or a value that
    /// does not parse, each named in the message.
    pub fn resolve(&self) -> anyhow::Result<Config> {
        let file = match &self.conf {
            Some(path) => read_file(path)?,
            None if Path::new("osprey.toml").exists() => read_file(Path::new("osprey.toml"))?,
            None => ConfigArgs::default(),
        };
        self.over(file)
    }

    /// Layers these settings over `file`'s, then over the defaults.
    ///
    /// # Errors
    /// As [`ConfigArgs::resolve`], without the file.
    pub fn over(&self, file: ConfigArgs) -> anyhow::Result<Config> {
        let limits = osprey_server::Limits::default();
        let query = osprey_query::QueryConfig::default();
        let store = osprey_store::StoreConfig::default();
        let network: Network = match self.network.clone().or(file.network) {
            Some(name) => name
                .parse()
                .map_err(anyhow::Error::msg)
                .context("network")?,
            None => Network::Bitcoin,
        };
        let db_dir = self
            .db_dir
            .clone()
            .or(file.db_dir)
            .unwrap_or_else(|| PathBuf::from("db"));
        let blocks_dir = self.blocks_dir.clone().or(file.blocks_dir);
        let block_source = match self.block_source.clone().or(file.block_source).as_deref() {
            None | Some("auto") => osprey_chain::BlockSourceChoice::Auto,
            Some("files") => {
                osprey_chain::BlockSourceChoice::Only(osprey_chain::BlockSource::Files)
            }
            Some("rest") => osprey_chain::BlockSourceChoice::Only(osprey_chain::BlockSource::Rest),
            Some("rpc") => osprey_chain::BlockSourceChoice::Only(osprey_chain::BlockSource::Rpc),
            Some(other) => bail!("block_source {other:?}: expected auto, files, rest or rpc"),
        };
        let chain = match blocks_dir {
            Some(dir) => ChainConfig::BlkFiles { dir },
            None => {
                let rpc_addr = self
                    .daemon_rpc_addr
                    .clone()
                    .or(file.daemon_rpc_addr)
                    .unwrap_or_else(|| format!("127.0.0.1:{}", network.default_daemon_rpc_port()));
                let network_dir = self
                    .daemon_dir
                    .clone()
                    .or(file.daemon_dir.clone())
                    .or_else(|| home_dir().map(|home| home.join(".bitcoin")))
                    .map(|dir| match network.daemon_subdir() {
                        Some(sub) => dir.join(sub),
                        None => dir,
                    });
                let auth = match (
                    self.auth.clone().or(file.auth),
                    self.cookie_file.clone().or(file.cookie_file),
                ) {
                    (Some(_), Some(_)) => bail!("give either auth or cookie_file, not both"),
                    (Some(auth), None) => {
                        let (user, pass) =
                            auth.split_once(':').context("auth must be USER:PASSWORD")?;
                        osprey_chain::rpc::Auth::UserPass(user.to_string(), pass.to_string())
                    }
                    (None, Some(cookie)) => osprey_chain::rpc::Auth::CookieFile(cookie),
                    (None, None) => {
                        let daemon_dir = match self.daemon_dir.clone().or(file.daemon_dir) {
                            Some(dir) => dir,
                            None => home_dir()
                                .context("cannot find the home directory; set --daemon-dir")?
                                .join(".bitcoin"),
                        };
                        let dir = match network.daemon_subdir() {
                            Some(sub) => daemon_dir.join(sub),
                            None => daemon_dir,
                        };
                        osprey_chain::rpc::Auth::CookieFile(dir.join(".cookie"))
                    }
                };
                ChainConfig::Node {
                    rpc_addr,
                    auth,
                    block_source,
                    blocks_dir: network_dir.map(|dir| dir.join("blocks")),
                }
            }
        };
        let electrum = self
            .electrum_rpc_addr
            .clone()
            .or(file.electrum_rpc_addr)
            .unwrap_or_else(|| format!("127.0.0.1:{}", network.default_electrum_port()));
        let electrum_rpc_addr = electrum
            .parse()
            .with_context(|| format!("electrum_rpc_addr {electrum:?} is not an IP:PORT address"))?;
        let optional_addr = |name: &str, value: Option<String>| {
            value
                .map(|v| {
                    v.parse::<SocketAddr>()
                        .with_context(|| format!("{name} {v:?} is not an IP:PORT address"))
                })
                .transpose()
        };
        let electrum_tls_addr = optional_addr(
            "electrum_tls_addr",
            self.electrum_tls_addr.clone().or(file.electrum_tls_addr),
        )?;
        let electrum_ws_addr = optional_addr(
            "electrum_ws_addr",
            self.electrum_ws_addr.clone().or(file.electrum_ws_addr),
        )?;
        let electrum_wss_addr = optional_addr(
            "electrum_wss_addr",
            self.electrum_wss_addr.clone().or(file.electrum_wss_addr),
        )?;
        let tls_listener = electrum_tls_addr.is_some() || electrum_wss_addr.is_some();
        let tls = match (
            self.tls_cert_file.clone().or(file.tls_cert_file),
            self.tls_key_file.clone().or(file.tls_key_file),
        ) {
            (Some(cert_file), Some(key_file)) => Some(osprey_server::TlsFiles {
                cert_file,
                key_file,
                self_signed: false,
            }),
            // Beside the networks' indexes, not in one: `--reindex` wipes
            // those, and wallets pinned this certificate.
            (None, None) if tls_listener => Some(osprey_server::TlsFiles {
                cert_file: db_dir.join("tls-cert.pem"),
                key_file: db_dir.join("tls-key.pem"),
                self_signed: true,
            }),
            (None, None) => None,
            _ => bail!(
                "give both tls_cert_file and tls_key_file, or neither for a self-signed certificate"
            ),
        };
        let monitoring_addr =
            match self.monitoring_addr.clone().or(file.monitoring_addr) {
                Some(addr) => Some(addr.parse().with_context(|| {
                    format!("monitoring_addr {addr:?} is not an IP:PORT address")
                })?),
                None => None,
            };
        let positive = |name: &str, v: usize| {
            if v == 0 {
                bail!("{name} must be at least 1");
            }
            Ok(v)
        };
        Ok(Config {
            network,
            db_path: db_dir.join(network.name()),
            chain,
            electrum_rpc_addr,
            log_filter: self
                .log_filter
                .clone()
                .or(file.log_filter)
                .unwrap_or_else(|| "info".into()),
            reindex: self.reindex,
            history_entries_max: positive(
                "history_entries_max",
                self.history_entries_max
                    .or(file.history_entries_max)
                    .unwrap_or(query.history_entries_max),
            )?,
            line_bytes_max: positive(
                "line_bytes_max",
                self.line_bytes_max
                    .or(file.line_bytes_max)
                    .unwrap_or(limits.line_bytes_max),
            )?,
            reply_bytes_max: positive(
                "reply_bytes_max",
                self.reply_bytes_max
                    .or(file.reply_bytes_max)
                    .unwrap_or(limits.reply_bytes_max),
            )?,
            batch_requests_max: positive(
                "batch_requests_max",
                self.batch_requests_max
                    .or(file.batch_requests_max)
                    .unwrap_or(limits.batch_requests_max),
            )?,
            subscriptions_per_session_max: positive(
                "subscriptions_per_session_max",
                self.subscriptions_per_session_max
                    .or(file.subscriptions_per_session_max)
                    .unwrap_or(limits.subscriptions_per_session_max),
            )?,
            sessions_max: positive(
                "sessions_max",
                self.sessions_max
                    .or(file.sessions_max)
                    .unwrap_or(limits.sessions_max),
            )?,
            reorg_depth_max: self
                .reorg_depth_max
                .or(file.reorg_depth_max)
                .unwrap_or(store.reorg_depth_max),
            poll_interval_ms: self
                .poll_interval_ms
                .or(file.poll_interval_ms)
                .unwrap_or(1000)
                .max(10),
            banner: self
                .banner
                .clone()
                .or(file.banner)
                .unwrap_or_else(|| "Welcome to Osprey".into()),
            client_memory_bytes_max: self
                .client_memory_bytes_max
                .or(file.client_memory_bytes_max)
                .unwrap_or(limits.client_memory_bytes_max),
            public_hosts: host_list(
                "public_hosts",
                self.public_hosts.clone().or(file.public_hosts),
            )?,
            peers: peer_list(self.peers.clone().or(file.peers))?,
            sessions_per_ip_max: positive(
                "sessions_per_ip_max",
                self.sessions_per_ip_max
                    .or(file.sessions_per_ip_max)
                    .unwrap_or(limits.sessions_per_ip_max),
            )?,
            trusted_subnets: match self.trusted_subnets.clone().or(file.trusted_subnets) {
                Some(list) => subnet_list(&list)?,
                None => limits.trusted_subnets,
            },
            worker_threads: positive(
                "worker_threads",
                self.worker_threads
                    .or(file.worker_threads)
                    .unwrap_or(limits.worker_threads),
            )?,
            db_cache_bytes: positive(
                "db_cache_mb",
                self.db_cache_mb
                    .or(file.db_cache_mb)
                    .unwrap_or(store.cache_bytes >> 20),
            )?
            .checked_mul(1 << 20)
            .context("db_cache_mb is too large")?,
            reindex_on_format_change: self
                .reindex_on_format_change
                .or(file.reindex_on_format_change)
                .unwrap_or(true),
            electrum_tls_addr,
            electrum_ws_addr,
            electrum_wss_addr,
            tls,
            monitoring_addr,
        })
    }
}

/// Parses a comma-separated list of `HOST[:tPORT][:sPORT]`.
fn host_list(name: &str, list: Option<String>) -> anyhow::Result<Vec<osprey_server::PublicHost>> {
    let Some(list) = list else {
        return Ok(Vec::new());
    };
    list.split(',')
        .filter(|item| !item.trim().is_empty())
        .map(|item| {
            item.parse()
                .map_err(|e: String| anyhow::anyhow!("{name}: {e}"))
        })
        .collect()
}

/// Parses `trusted_subnets`: comma-separated CIDR networks.
fn subnet_list(list: &str) -> anyhow::Result<Vec<osprey_server::Subnet>> {
    list.split(',')
        .filter(|item| !item.trim().is_empty())
        .map(|item| {
            item.parse()
                .map_err(|e: String| anyhow::anyhow!("trusted_subnets: {e}"))
        })
        .collect()
}

/// Parses `peers`: each needs a TCP port, as peers are checked over TCP.
fn peer_list(list: Option<String>) -> anyhow::Result<Vec<osprey_server::PublicHost>> {
    let peers = host_list("peers", list)?;
    if let Some(peer) = peers.iter().find(|p| p.tcp_port.is_none() || p.is_onion()) {
        bail!(
            "peers: {} needs a TCP port and a clearnet host (Osprey checks peers over TCP)",
            peer.host
        );
    }
    Ok(peers)
}

fn read_file(path: &Path) -> anyhow::Result<ConfigArgs> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading config file {}", path.display()))?;
    toml::from_str(&text).with_context(|| format!("config file {}", path.display()))
}

fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME").map(PathBuf::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(conf: Option<&Path>) -> ConfigArgs {
        ConfigArgs {
            conf: conf.map(Path::to_path_buf),
            ..ConfigArgs::default()
        }
    }

    #[test]
    fn flags_override_the_file_which_overrides_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("osprey.toml");
        std::fs::write(
            &path,
            "network = \"regtest\"\nauth = \"u:p\"\nsessions_max = 7\nbanner = \"hi\"\n",
        )
        .unwrap();
        let mut a = args(Some(&path));
        a.banner = Some("flag".into());
        let c = a.resolve().unwrap();
        assert_eq!(c.network, Network::Regtest);
        assert_eq!(c.sessions_max, 7);
        assert_eq!(c.banner, "flag");
        assert_eq!(c.electrum_rpc_addr.port(), 60401);
        assert!(
            matches!(c.chain, ChainConfig::Node { ref rpc_addr, .. } if rpc_addr == "127.0.0.1:18443")
        );
        assert!(c.db_path.ends_with("db/regtest"));
    }

    #[test]
    fn typos_are_reported_with_the_key() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("osprey.toml");
        std::fs::write(&path, "netwrok = \"regtest\"\n").unwrap();
        let err = format!("{:#}", args(Some(&path)).resolve().unwrap_err());
        assert!(err.contains("netwrok"), "{err}");
        let mut a = args(None);
        a.network = Some("mainnet2".into());
        assert!(format!("{:#}", a.resolve().unwrap_err()).contains("unknown network"));
        let mut a = args(None);
        a.electrum_rpc_addr = Some("localhost".into());
        assert!(format!("{:#}", a.resolve().unwrap_err()).contains("electrum_rpc_addr"));
        let mut a = args(None);
        a.monitoring_addr = Some("4224".into());
        assert!(format!("{:#}", a.resolve().unwrap_err()).contains("monitoring_addr"));
        let mut a = args(None);
        a.auth = Some("nocolon".into());
        assert!(format!("{:#}", a.resolve().unwrap_err()).contains("USER:PASSWORD"));
    }

    #[test]
    fn tls_listeners_get_a_kept_self_signed_certificate_unless_given_one() {
        let mut a = args(None);
        a.db_dir = Some("/data/osprey".into());
        let c = a.resolve().unwrap();
        assert_eq!(
            (c.electrum_tls_addr, c.tls.clone()),
            (None, None),
            "off by default"
        );
        a.electrum_wss_addr = Some("0.0.0.0:50004".into());
        let c = a.resolve().unwrap();
        assert_eq!(c.electrum_wss_addr, Some("0.0.0.0:50004".parse().unwrap()));
        assert_eq!(
            c.tls,
            Some(osprey_server::TlsFiles {
                cert_file: "/data/osprey/tls-cert.pem".into(),
                key_file: "/data/osprey/tls-key.pem".into(),
                self_signed: true,
            }),
            "beside the networks' indexes, which --reindex deletes"
        );
        a.tls_cert_file = Some("/etc/le/fullchain.pem".into());
        let err = format!("{:#}", a.resolve().unwrap_err());
        assert!(err.contains("tls_key_file"), "{err}");
        a.tls_key_file = Some("/etc/le/privkey.pem".into());
        let tls = a.resolve().unwrap().tls.unwrap();
        assert_eq!(
            (tls.cert_file.to_str(), tls.self_signed),
            (Some("/etc/le/fullchain.pem"), false)
        );
        a.electrum_tls_addr = Some("localhost:50002".into());
        let err = format!("{:#}", a.resolve().unwrap_err());
        assert!(err.contains("electrum_tls_addr"), "{err}");
    }

    /// The default a resolved `Config` has for `key`, as the README writes
    /// it; `None` for defaults that depend on the network or the machine.
    fn resolved_default(config: &Config, key: &str) -> Option<String> {
        Some(match key {
            "network" => config.network.name().to_string(),
            "log_filter" => config.log_filter.clone(),
            "history_entries_max" => config.history_entries_max.to_string(),
            "line_bytes_max" => config.line_bytes_max.to_string(),
            "reply_bytes_max" => config.reply_bytes_max.to_string(),
            "batch_requests_max" => config.batch_requests_max.to_string(),
            "subscriptions_per_session_max" => config.subscriptions_per_session_max.to_string(),
            "sessions_max" => config.sessions_max.to_string(),
            "reorg_depth_max" => config.reorg_depth_max.to_string(),
            "poll_interval_ms" => config.poll_interval_ms.to_string(),
            "banner" => config.banner.clone(),
            "client_memory_bytes_max" => config.client_memory_bytes_max.to_string(),
            "sessions_per_ip_max" => config.sessions_per_ip_max.to_string(),
            "trusted_subnets" => config
                .trusted_subnets
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(","),
            "db_cache_mb" => (config.db_cache_bytes >> 20).to_string(),
            "reindex_on_format_change" => config.reindex_on_format_change.to_string(),
            "block_source" => match &config.chain {
                ChainConfig::Node {
                    block_source: osprey_chain::BlockSourceChoice::Auto,
                    ..
                } => "auto".to_string(),
                other => format!("{other:?}"),
            },
            "conf" | "db_dir" | "daemon_dir" | "daemon_rpc_addr" | "cookie_file" | "auth"
            | "blocks_dir" | "electrum_rpc_addr" | "reindex" | "public_hosts" | "peers"
            | "electrum_tls_addr" | "tls_cert_file" | "tls_key_file" | "electrum_ws_addr"
            | "electrum_wss_addr" | "monitoring_addr" | "worker_threads" => return None,
            other => panic!("setting {other} is new: say here what its default resolves to"),
        })
    }

    /// The rows of the README's config table, each cell without its
    /// backticks.
    fn readme_rows() -> Vec<Vec<String>> {
        let readme = include_str!("../README.md");
        let section = readme
            .split("\n## Configuration\n")
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .expect("README has a Configuration section");
        section
            .lines()
            .filter(|line| line.starts_with("| `--"))
            .map(|line| {
                line.trim_matches('|')
                    .split(" | ")
                    .map(|cell| cell.trim().trim_matches('`').to_string())
                    .collect()
            })
            .collect()
    }

    #[test]
    fn settings_agree_with_the_readme() {
        use clap::Args as _;
        let rows = readme_rows();
        let command = ConfigArgs::augment_args(clap::Command::new("osprey"));
        let flags: Vec<&clap::Arg> = command
            .get_arguments()
            .filter(|arg| arg.get_long().is_some())
            .collect();
        let mut documented: Vec<&str> = rows.iter().map(|row| row[0].as_str()).collect();
        let mut declared: Vec<String> = flags
            .iter()
            .map(|arg| format!("--{}", arg.get_long().unwrap()))
            .collect();
        documented.sort_unstable();
        declared.sort_unstable();
        assert_eq!(documented, declared, "README rows vs flags");

        let defaults = ConfigArgs::default().over(ConfigArgs::default()).unwrap();
        for row in &rows {
            let [flag, key, env, default, _meaning] = row.as_slice() else {
                panic!("README row {row:?} does not have 5 cells");
            };
            let name = flag.trim_start_matches("--").replace('-', "_");
            let arg = flags
                .iter()
                .find(|arg| format!("--{}", arg.get_long().unwrap()) == *flag)
                .unwrap();
            let declared_env = arg.get_env().and_then(|e| e.to_str()).unwrap_or("");
            assert_eq!(env, declared_env, "{flag}: environment variable");
            assert_eq!(
                declared_env,
                format!("OSPREY_{}", name.to_uppercase()),
                "{flag}: environment variable"
            );
            // The config key is the field's name: the file knows it (a wrong
            // type is fine here, an unknown field is not) unless it is
            // flag-only.
            let parsed = toml::from_str::<ConfigArgs>(&format!("{name} = 1"));
            let unknown = parsed
                .as_ref()
                .err()
                .is_some_and(|e| e.to_string().contains("unknown field"));
            if key == "—" {
                assert!(unknown, "{flag}: flag-only, yet the file takes {name}");
            } else {
                assert_eq!(*key, name, "{flag}: config key");
                assert!(!unknown, "{flag}: the config file rejects {name}");
            }
            let help = arg.get_help().map(ToString::to_string).unwrap_or_default();
            match help.split_once("[default: ") {
                Some((_, rest)) => {
                    let said = rest.trim_end_matches(']').trim_matches('"');
                    assert_eq!(default, said, "{flag}: README default vs --help");
                }
                None => assert!(
                    default == "—" || default == "off",
                    "{flag}: README gives a default ({default}) that --help does not"
                ),
            }
            if let Some(actual) = resolved_default(&defaults, &name) {
                assert_eq!(
                    *default, actual,
                    "{flag}: README default vs the resolved one"
                );
            }
        }
        // The server's own defaults are the ones documented.
        let limits = osprey_server::Limits::default();
        assert_eq!(defaults.line_bytes_max, limits.line_bytes_max);
        assert_eq!(defaults.batch_requests_max, limits.batch_requests_max);
        assert_eq!(defaults.sessions_per_ip_max, limits.sessions_per_ip_max);
    }

    #[test]
    fn public_hosts_and_peers_are_lists_of_hosts_and_ports() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("osprey.toml");
        std::fs::write(
            &path,
            "auth = \"u:p\"\npublic_hosts = \"Electrum.Example.com:t50001:s50002, [2001:db8::1]:s50002\"\npeers = \"a.example.org:t50001,b.example.org:t50001:s50002\"\n",
        )
        .unwrap();
        let c = args(Some(&path)).resolve().unwrap();
        let names: Vec<(&str, Option<u16>, Option<u16>)> = c
            .public_hosts
            .iter()
            .map(|h| (h.host.as_str(), h.tcp_port, h.ssl_port))
            .collect();
        assert_eq!(
            names,
            [
                ("electrum.example.com", Some(50001), Some(50002)),
                ("2001:db8::1", None, Some(50002))
            ]
        );
        assert_eq!(c.peers.len(), 2);
        assert_eq!(c.sessions_per_ip_max, 12);
        let mut a = args(Some(&path));
        a.peers = Some("tls-only.example.org:s50002".into());
        let err = format!("{:#}", a.resolve().unwrap_err());
        assert!(
            err.contains("peers: tls-only.example.org needs a TCP port"),
            "{err}"
        );
        let mut a = args(Some(&path));
        a.public_hosts = Some("example.com".into());
        let err = format!("{:#}", a.resolve().unwrap_err());
        assert!(
            err.starts_with("public_hosts: \"example.com\": give at least one port"),
            "{err}"
        );
        let mut a = args(Some(&path));
        a.sessions_per_ip_max = Some(0);
        let err = format!("{:#}", a.resolve().unwrap_err());
        assert!(
            err.contains("sessions_per_ip_max must be at least 1"),
            "{err}"
        );
    }

    /// `contrib/osprey.toml.example` names every config key of the README
    /// table, each one parses (an unknown key is refused), and each whose
    /// default does not depend on the machine shows exactly that default.
    #[test]
    fn example_config_has_every_key_with_its_default() {
        let example = include_str!("../contrib/osprey.toml.example");
        // Settings are commented out as `#key = value`; prose is `# text`.
        let settings: Vec<&str> = example
            .lines()
            .filter_map(|line| line.strip_prefix('#'))
            .filter(|rest| rest.starts_with(|c: char| c.is_ascii_lowercase()))
            .collect();
        let uncommented = settings.join("\n");
        toml::from_str::<ConfigArgs>(&uncommented)
            .unwrap_or_else(|e| panic!("the example's settings: {e}"));
        let keys: Vec<&str> = settings
            .iter()
            .map(|line| line.split(" = ").next().unwrap_or(line))
            .collect();
        let mut documented: Vec<String> = readme_rows()
            .into_iter()
            .map(|row| row[1].clone())
            .filter(|key| key != "—")
            .collect();
        let mut listed: Vec<String> = keys.iter().map(ToString::to_string).collect();
        documented.sort_unstable();
        listed.sort_unstable();
        assert_eq!(
            listed, documented,
            "example keys vs the README's config keys"
        );

        let defaults = ConfigArgs::default().over(ConfigArgs::default()).unwrap();
        // Settings that are given together or not at all.
        let partner = |key: &str| match key {
            "tls_cert_file" => Some("tls_key_file"),
            "tls_key_file" => Some("tls_cert_file"),
            _ => None,
        };
        for (line, key) in settings.iter().zip(&keys) {
            let with_partner = match partner(key) {
                Some(other) => {
                    let other_line = settings
                        .iter()
                        .find(|l| l.starts_with(&format!("{other} = ")))
                        .unwrap_or_else(|| panic!("{key} without {other}"));
                    format!("{line}\n{other_line}")
                }
                None => line.to_string(),
            };
            let alone: ConfigArgs = toml::from_str(&with_partner).unwrap();
            let config = ConfigArgs::default()
                .over(alone)
                .unwrap_or_else(|e| panic!("example line {line:?}: {e:#}"));
            if let Some(default) = resolved_default(&defaults, key) {
                assert_eq!(
                    resolved_default(&config, key),
                    Some(default),
                    "example line {line:?} does not show the default"
                );
            }
        }
        // The addresses' defaults depend on the network: the example shows
        // mainnet's, the default network.
        for key in ["daemon_rpc_addr", "electrum_rpc_addr", "db_dir"] {
            let line = settings
                .iter()
                .find(|line| line.starts_with(&format!("{key} = ")))
                .unwrap();
            let config = ConfigArgs::default()
                .over(toml::from_str(line).unwrap())
                .unwrap();
            assert_eq!(
                format!(
                    "{:?} {:?} {:?}",
                    config.electrum_rpc_addr, config.db_path, config.chain
                ),
                format!(
                    "{:?} {:?} {:?}",
                    defaults.electrum_rpc_addr, defaults.db_path, defaults.chain
                ),
                "example line {line:?} does not show the default"
            );
        }
    }

    #[test]
    fn cookie_defaults_to_the_networks_daemon_dir() {
        let mut a = args(None);
        a.network = Some("testnet4".into());
        a.daemon_dir = Some("/data/bitcoin".into());
        let c = a.resolve().unwrap();
        match c.chain {
            ChainConfig::Node {
                auth: osprey_chain::rpc::Auth::CookieFile(p),
                ..
            } => {
                assert_eq!(p, PathBuf::from("/data/bitcoin/testnet4/.cookie"));
            }
            other => panic!("{other:?}"),
        }
    }
}
