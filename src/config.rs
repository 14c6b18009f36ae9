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

mod electrs;

use anyhow::{bail, Context};
use clap::Args;
use osprey_core::Network;
use serde::Deserialize;
use std::fmt::Debug;
use std::net::{SocketAddr, ToSocketAddrs};
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
    /// Also read every file in this directory, in name order, before
    /// --conf (electrs' --conf-dir)
    #[arg(long, env = "OSPREY_CONF_DIR")]
    #[serde(skip)]
    pub conf_dir: Option<PathBuf>,
    /// Do not read ./osprey.toml (electrs' --skip-default-conf-files)
    #[arg(long, env = "OSPREY_SKIP_DEFAULT_CONF_FILES")]
    #[serde(skip)]
    pub skip_default_conf_files: bool,

    // electrs' names, hidden from --help: see `electrs::SETTINGS` for what
    // Osprey does with each.
    /// electrs' name of --banner
    #[arg(long, env = "OSPREY_SERVER_BANNER", hide = true)]
    pub server_banner: Option<String>,
    /// electrs' name of --log-filter
    #[arg(long, env = "OSPREY_LOG_FILTERS", hide = true)]
    pub log_filters: Option<String>,
    /// electrs' --history-entries-max, 0 for no limit
    #[arg(long, env = "OSPREY_INDEX_LOOKUP_LIMIT", hide = true)]
    pub index_lookup_limit: Option<usize>,
    /// electrs' --poll-interval-ms, in seconds
    #[arg(long, env = "OSPREY_WAIT_DURATION_SECS", hide = true)]
    pub wait_duration_secs: Option<u64>,
    /// electrs: index to the tip, then exit
    #[arg(long, env = "OSPREY_SYNC_ONCE", hide = true)]
    #[serde(default)]
    pub sync_once: bool,
    #[arg(short = 'v', long, env = "OSPREY_VERBOSE", action = clap::ArgAction::Count, hide = true)]
    #[serde(default)]
    pub verbose: u8,
    #[arg(long, env = "OSPREY_TIMESTAMP", hide = true)]
    #[serde(default)]
    pub timestamp: bool,
    /// `auto_reindex = true|false` in the file, `--auto-reindex BOOL`
    #[arg(long, env = "OSPREY_AUTO_REINDEX", hide = true)]
    pub auto_reindex: Option<bool>,
    /// electrs' flag form of `auto_reindex = false`
    #[arg(long, hide = true)]
    #[serde(skip)]
    pub no_auto_reindex: bool,
    #[arg(long, env = "OSPREY_DB_LOG_DIR", hide = true)]
    pub db_log_dir: Option<PathBuf>,
    #[arg(long, env = "OSPREY_DB_PARALLELISM", hide = true)]
    pub db_parallelism: Option<u8>,
    #[arg(long, env = "OSPREY_JSONRPC_TIMEOUT_SECS", hide = true)]
    pub jsonrpc_timeout_secs: Option<u64>,
    #[arg(long, env = "OSPREY_IGNORE_MEMPOOL", hide = true)]
    #[serde(default)]
    pub ignore_mempool: bool,
    #[arg(long, env = "OSPREY_DISABLE_ELECTRUM_RPC", hide = true)]
    #[serde(default)]
    pub disable_electrum_rpc: bool,
    #[arg(long, env = "OSPREY_SKIP_BLOCK_DOWNLOAD_WAIT", hide = true)]
    #[serde(default)]
    pub skip_block_download_wait: bool,
    /// Any value but false, no, off or 0 counts as set: images often define
    /// an `OSPREY_VERSION` variable of their own, which must not stop startup.
    #[arg(long, env = "OSPREY_VERSION", hide = true, value_parser = clap::builder::FalseyValueParser::new())]
    #[serde(default)]
    pub version: bool,
    #[arg(long, env = "OSPREY_REINDEX_LAST_BLOCKS", hide = true)]
    pub reindex_last_blocks: Option<usize>,
    #[arg(long, env = "OSPREY_DAEMON_P2P_ADDR", hide = true)]
    pub daemon_p2p_addr: Option<String>,
    #[arg(long, env = "OSPREY_INDEX_BATCH_SIZE", hide = true)]
    pub index_batch_size: Option<usize>,
    #[arg(long, env = "OSPREY_SIGNET_MAGIC", hide = true)]
    pub signet_magic: Option<String>,
    #[arg(long, env = "OSPREY_MAGIC", hide = true)]
    pub magic: Option<String>,
    #[arg(long, env = "OSPREY_COOKIE", hide = true, hide_env_values = true)]
    pub cookie: Option<String>,
    #[arg(long, env = "OSPREY_JSONRPC_IMPORT", hide = true)]
    #[serde(default)]
    pub jsonrpc_import: bool,
    #[arg(long, env = "OSPREY_BULK_INDEX_THREADS", hide = true)]
    pub bulk_index_threads: Option<usize>,
    #[arg(long, env = "OSPREY_TX_CACHE_SIZE_MB", hide = true)]
    pub tx_cache_size_mb: Option<f64>,
    #[arg(long, env = "OSPREY_BLOCKTXIDS_CACHE_SIZE_MB", hide = true)]
    pub blocktxids_cache_size_mb: Option<f64>,
    #[arg(long, env = "OSPREY_TXID_LIMIT", hide = true)]
    pub txid_limit: Option<usize>,
}

impl ConfigArgs {
    /// Whether electrs setting `key`, one Osprey ignores, is set here (a
    /// switch that is off asks for what Osprey does anyway).
    fn sets_ignored(&self, key: &str) -> bool {
        match key {
            "verbose" => self.verbose > 0,
            "timestamp" => self.timestamp,
            "db_log_dir" => self.db_log_dir.is_some(),
            "db_parallelism" => self.db_parallelism.is_some(),
            "jsonrpc_timeout_secs" => self.jsonrpc_timeout_secs.is_some(),
            "ignore_mempool" => self.ignore_mempool,
            "disable_electrum_rpc" => self.disable_electrum_rpc,
            "skip_block_download_wait" => self.skip_block_download_wait,
            "version" => self.version,
            "reindex_last_blocks" => self.reindex_last_blocks.is_some(),
            "daemon_p2p_addr" => self.daemon_p2p_addr.is_some(),
            "index_batch_size" => self.index_batch_size.is_some(),
            "signet_magic" => self.signet_magic.is_some(),
            "magic" => self.magic.is_some(),
            "cookie" => self.cookie.is_some(),
            "jsonrpc_import" => self.jsonrpc_import,
            "bulk_index_threads" => self.bulk_index_threads.is_some(),
            "tx_cache_size_mb" => self.tx_cache_size_mb.is_some(),
            "blocktxids_cache_size_mb" => self.blocktxids_cache_size_mb.is_some(),
            "txid_limit" => self.txid_limit.is_some(),
            other => panic!("electrs setting {other} is not one Osprey ignores"),
        }
    }
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
    /// `osprey serve` indexes to the tip and exits (electrs' `sync_once`).
    pub sync_once: bool,
    /// One line per setting that was accepted but is not honoured, for
    /// the caller to log once logging is up.
    pub warnings: Vec<String>,
}

impl ConfigArgs {
    /// Layers flags and environment over the config file over defaults.
    ///
    /// # Errors
    /// A missing or malformed config file, an unknown key, or a value that
    /// does not parse, each named in the message.
    pub fn resolve(&self) -> anyhow::Result<Config> {
        let files = self.config_files()?;
        let mut config = self.over(read_files(&files)?)?;
        if !self.skip_default_conf_files {
            let read: Vec<PathBuf> = files.iter().filter_map(|p| p.canonicalize().ok()).collect();
            let home = home_dir();
            let electrs_files = [
                Some(PathBuf::from("/etc/electrs/config.toml")),
                home.map(|home| home.join(".electrs/config.toml")),
                Some(PathBuf::from("electrs.toml")),
            ];
            for path in electrs_files.into_iter().flatten() {
                if path.canonicalize().is_ok_and(|path| !read.contains(&path)) {
                    config.warnings.push(format!(
                        "{} exists: electrs reads it by default, Osprey does not (pass --conf {0} to use it)",
                        path.display()
                    ));
                }
            }
        }
        // electrs names its index directory as Osprey does (db_dir/bitcoin,
        // db_dir/testnet4, ...), RocksDB's files directly in it; Osprey's
        // own RocksDB is in its rocksdb/ sub-directory.
        if config.db_path.join("CURRENT").is_file() {
            config.warnings.push(format!(
                "db_dir: {} holds an electrs index, which Osprey does not read: Osprey builds its own beside it (rocksdb/ and *.dat); delete electrs' files there once electrs is gone (Osprey's --reindex and format rebuilds delete only its own)",
                config.db_path.display()
            ));
        }
        Ok(config)
    }

    /// The config files to read, lowest precedence first: ./osprey.toml
    /// unless --conf or --skip-default-conf-files is given, every file of
    /// --conf-dir in name order, then --conf.
    fn config_files(&self) -> anyhow::Result<Vec<PathBuf>> {
        let mut files = Vec::new();
        let default = Path::new("osprey.toml");
        if self.conf.is_none() && !self.skip_default_conf_files && default.exists() {
            files.push(default.to_path_buf());
        }
        if let Some(dir) = &self.conf_dir {
            let mut in_dir = std::fs::read_dir(dir)
                .and_then(|entries| {
                    entries
                        .map(|entry| entry.map(|e| e.path()))
                        .collect::<std::io::Result<Vec<PathBuf>>>()
                })
                .with_context(|| format!("reading conf_dir {}", dir.display()))?;
            in_dir.retain(|path| path.is_file());
            in_dir.sort();
            files.extend(in_dir);
        }
        files.extend(self.conf.clone());
        Ok(files)
    }

    /// Layers these settings over `file`'s, then over the defaults.
    ///
    /// # Errors
    /// As [`ConfigArgs::resolve`], without the file.
    pub fn over(&self, file: ConfigArgs) -> anyhow::Result<Config> {
        let limits = osprey_server::Limits::default();
        let query = osprey_query::QueryConfig::default();
        let store = osprey_store::StoreConfig::default();
        let warnings = electrs::SETTINGS
            .iter()
            .filter_map(|(key, _)| {
                let warning = electrs::warning(key)?;
                (self.sets_ignored(key) || file.sets_ignored(key)).then_some(warning)
            })
            .collect();
        // Osprey's setting or its electrs name, one layer at a time, so
        // that a flag of either name overrides the file's.
        let reindex_on_format_change = self
            .reindex_on_format_change_either()?
            .or(file.reindex_on_format_change_either()?)
            .unwrap_or(true);
        let banner = self
            .banner_either()?
            .or(file.banner_either()?)
            .unwrap_or_else(|| "Welcome to Osprey".into());
        let log_filter = self
            .log_filter_either()?
            .or(file.log_filter_either()?)
            .unwrap_or_else(|| "info".into());
        let history_entries_max = self
            .history_entries_max_either()?
            .or(file.history_entries_max_either()?)
            .unwrap_or(query.history_entries_max);
        let poll_interval_ms = self
            .poll_interval_ms_either()?
            .or(file.poll_interval_ms_either()?)
            .unwrap_or(1000)
            .max(10);
        let sync_once = self.sync_once || file.sync_once;
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
        let electrum_rpc_addr = resolve_addr("electrum_rpc_addr", &electrum)?;
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
        let monitoring_addr = self
            .monitoring_addr
            .clone()
            .or(file.monitoring_addr)
            .map(|addr| resolve_addr("monitoring_addr", &addr))
            .transpose()?;
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
            log_filter,
            reindex: self.reindex,
            history_entries_max: positive("history_entries_max", history_entries_max)?,
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
            poll_interval_ms,
            banner,
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
            trusted_subnets: match self
                .trusted_subnets
                .clone()
                .or(file.trusted_subnets.clone())
            {
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
            reindex_on_format_change,
            electrum_tls_addr,
            electrum_ws_addr,
            electrum_wss_addr,
            tls,
            monitoring_addr,
            sync_once,
            warnings,
        })
    }

    fn banner_either(&self) -> anyhow::Result<Option<String>> {
        either(
            ("banner", self.banner.clone()),
            ("server_banner", self.server_banner.clone()),
        )
    }

    fn log_filter_either(&self) -> anyhow::Result<Option<String>> {
        either(
            ("log_filter", self.log_filter.clone()),
            ("log_filters", self.log_filters.clone()),
        )
    }

    fn history_entries_max_either(&self) -> anyhow::Result<Option<usize>> {
        // electrs: "0 - disable the limit".
        let electrs = self
            .index_lookup_limit
            .map(|limit| if limit == 0 { usize::MAX } else { limit });
        either(
            ("history_entries_max", self.history_entries_max),
            ("index_lookup_limit", electrs),
        )
    }

    fn reindex_on_format_change_either(&self) -> anyhow::Result<Option<bool>> {
        // electrs' flag form `--no-auto-reindex` is `auto_reindex = false`.
        let electrs = match (self.auto_reindex, self.no_auto_reindex) {
            (Some(true), true) => bail!("auto_reindex is true, yet --no-auto-reindex is given"),
            (_, true) => Some(false),
            (value, false) => value,
        };
        either(
            ("reindex_on_format_change", self.reindex_on_format_change),
            ("auto_reindex", electrs),
        )
    }

    fn poll_interval_ms_either(&self) -> anyhow::Result<Option<u64>> {
        let electrs = self
            .wait_duration_secs
            .map(|secs| secs.saturating_mul(1000));
        either(
            ("poll_interval_ms", self.poll_interval_ms),
            ("wait_duration_secs", electrs),
        )
    }
}

/// A setting given by its Osprey name or its electrs name (converted to
/// Osprey's unit) in one layer: both must agree.
fn either<T: PartialEq + Debug>(
    (osprey_key, osprey): (&str, Option<T>),
    (electrs_key, electrs): (&str, Option<T>),
) -> anyhow::Result<Option<T>> {
    match (osprey, electrs) {
        (Some(a), Some(b)) if a != b => bail!(
            "{osprey_key} ({a:?}) and electrs' {electrs_key} (as {osprey_key}: {b:?}) disagree: give one of them"
        ),
        (a, b) => Ok(a.or(b)),
    }
}

/// An `IP:PORT` address, or `HOST:PORT` resolved to its first address as
/// electrs does for its addresses.
fn resolve_addr(name: &str, value: &str) -> anyhow::Result<SocketAddr> {
    if let Ok(addr) = value.parse() {
        return Ok(addr);
    }
    value
        .to_socket_addrs()
        .ok()
        .and_then(|mut addrs| addrs.next())
        .with_context(|| {
            format!("{name} {value:?} is neither IP:PORT nor a HOST:PORT that resolves")
        })
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

/// Reads `paths` in order, a later file's keys over an earlier's; each
/// file is checked on its own so that an error names it.
fn read_files(paths: &[PathBuf]) -> anyhow::Result<ConfigArgs> {
    let mut merged = toml::Table::new();
    for path in paths {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading config file {}", path.display()))?;
        toml::from_str::<ConfigArgs>(&text)
            .with_context(|| format!("config file {}", path.display()))?;
        let table: toml::Table =
            toml::from_str(&text).with_context(|| format!("config file {}", path.display()))?;
        merged.extend(table);
    }
    toml::Value::Table(merged)
        .try_into()
        .context("config files")
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
            "conf"
            | "db_dir"
            | "daemon_dir"
            | "daemon_rpc_addr"
            | "cookie_file"
            | "auth"
            | "blocks_dir"
            | "electrum_rpc_addr"
            | "reindex"
            | "public_hosts"
            | "peers"
            | "electrum_tls_addr"
            | "tls_cert_file"
            | "tls_key_file"
            | "electrum_ws_addr"
            | "electrum_wss_addr"
            | "monitoring_addr"
            | "conf_dir"
            | "skip_default_conf_files"
            | "worker_threads" => return None,
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
            // electrs' names are hidden, and listed under "Replacing electrs".
            .filter(|arg| arg.get_long().is_some() && !arg.is_hide_set())
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

    /// electrs' documented example config, committed verbatim from
    /// romanz/electrs `doc/config_example.toml` (see tests/data/electrs/).
    const ELECTRS_EXAMPLE: &str = include_str!("../tests/data/electrs/config_example.toml");
    /// electrs' configure_me spec, committed verbatim from romanz/electrs
    /// `internal/config_specification.toml`.
    const ELECTRS_SPEC: &str = include_str!("../tests/data/electrs/config_specification.toml");

    fn from_toml(text: &str) -> anyhow::Result<Config> {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("electrs.toml");
        std::fs::write(&path, text).unwrap();
        ConfigArgs::default().over(read_files(&[path])?)
    }

    #[test]
    fn electrs_example_config_starts_osprey_with_its_values() {
        let c = from_toml(ELECTRS_EXAMPLE).unwrap();
        assert_eq!(c.network, Network::Bitcoin);
        assert_eq!(
            c.db_path,
            PathBuf::from("/some/fast/storage/with/big/size/bitcoin"),
            "electrs' db_dir/<network> too"
        );
        match &c.chain {
            ChainConfig::Node { rpc_addr, auth, .. } => {
                assert_eq!(rpc_addr, "127.0.0.1:8332");
                assert!(
                    matches!(auth, osprey_chain::rpc::Auth::CookieFile(p) if p == Path::new("/var/run/bitcoin-mainnet/cookie")),
                    "{auth:?}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(c.electrum_rpc_addr, "127.0.0.1:50001".parse().unwrap());
        assert_eq!(c.log_filter, "INFO");
        tracing_subscriber::EnvFilter::try_new(&c.log_filter).expect("electrs' level names");
        assert_eq!(c.warnings, Vec::<String>::new(), "every key is honoured");
    }

    /// The file Start9's electrs package writes, with its defaults
    /// (Start9Labs/electrs-startos `startos/fileModels/electrs.toml.ts` and
    /// `configDefaults` in `startos/utils.ts`, before bc5ac7bc).
    #[test]
    fn start9s_electrs_file_starts_osprey() {
        let c = from_toml(
            "cookie_file = \"/mnt/bitcoind/.cookie\"\n\
             daemon_rpc_addr = \"bitcoind.startos:8332\"\n\
             daemon_p2p_addr = \"bitcoind.startos:8333\"\n\
             network = \"bitcoin\"\n\
             electrum_rpc_addr = \"0.0.0.0:50001\"\n\
             log_filters = \"INFO\"\n\
             index_batch_size = 10\n\
             index_lookup_limit = 0\n",
        )
        .unwrap();
        assert_eq!(c.history_entries_max, usize::MAX);
        assert_eq!(c.electrum_rpc_addr, "0.0.0.0:50001".parse().unwrap());
        assert!(
            matches!(&c.chain, ChainConfig::Node { rpc_addr, .. } if rpc_addr == "bitcoind.startos:8332"),
            "a host name, resolved when connecting: {:?}",
            c.chain
        );
        let ignored: Vec<&str> = c
            .warnings
            .iter()
            .map(|w| w.split(' ').next().unwrap())
            .collect();
        assert_eq!(ignored, ["daemon_p2p_addr", "index_batch_size"]);
    }

    /// The settings electrs 0.12's spec declares, and the values its types
    /// take (for a TOML line).
    fn spec_settings() -> Vec<(String, &'static str)> {
        let spec: toml::Table = toml::from_str(ELECTRS_SPEC).unwrap();
        let mut settings = Vec::new();
        for (kind, items) in [("param", &spec["param"]), ("switch", &spec["switch"])] {
            for item in items.as_array().unwrap() {
                let name = item["name"].as_str().unwrap().to_string();
                let sample = match (kind, item.get("type").and_then(|t| t.as_str())) {
                    ("switch", _) if item.get("count").is_some() => "2",
                    ("switch", _) => "true",
                    (_, Some("u8" | "u64" | "usize")) => "3",
                    (_, Some("crate::config::BitcoinNetwork")) => "\"signet\"",
                    (_, Some("crate::config::ResolvAddr")) => "\"127.0.0.1:9\"",
                    (_, Some("std::path::PathBuf" | "String")) => "\"/tmp/x\"",
                    (_, other) => panic!("spec type {other:?} of {name}: add a sample"),
                };
                settings.push((name, sample));
            }
        }
        for general in [
            "conf_file_param",
            "conf_dir_param",
            "skip_default_conf_files_switch",
        ] {
            let name = spec["general"][general].as_str().unwrap();
            settings.push((name.to_string(), "flag only"));
        }
        settings
    }

    #[test]
    fn every_electrs_setting_is_honoured_or_warned_about_once() {
        use clap::Args as _;
        let spec = spec_settings();
        assert!(spec.len() >= 27, "the spec parsed: {spec:?}");
        let known: Vec<&str> = electrs::SETTINGS.iter().map(|(key, _)| *key).collect();
        for (key, _) in &spec {
            assert!(
                known.contains(&key.as_str()),
                "electrs' {key} is missing from electrs::SETTINGS"
            );
        }
        // Keys of earlier releases, with a value each.
        let older = [
            ("daemon_p2p_addr", "\"127.0.0.1:8333\""),
            ("index_batch_size", "10"),
            ("signet_magic", "\"0a03cf40\""),
            ("magic", "\"f9beb4d9\""),
            ("cookie", "\"user:pass\""),
            ("jsonrpc_import", "true"),
            ("bulk_index_threads", "2"),
            ("tx_cache_size_mb", "10.0"),
            ("blocktxids_cache_size_mb", "10.0"),
            ("txid_limit", "100"),
        ];
        let command = ConfigArgs::augment_args(clap::Command::new("osprey"));
        for arg in command.get_arguments().filter(|arg| arg.is_hide_set()) {
            let long = arg.get_long().unwrap();
            let key = long.trim_start_matches("no-").replace('-', "_");
            assert!(
                known.contains(&key.as_str()),
                "hidden --{long} is no electrs setting"
            );
        }
        for (key, what) in electrs::SETTINGS {
            let sample = spec
                .iter()
                .find(|(name, _)| name == key)
                .map(|(_, sample)| *sample)
                .or_else(|| older.iter().find(|(name, _)| name == key).map(|(_, s)| *s))
                .unwrap_or_else(|| panic!("{key}: neither in the spec nor an older key"));
            // The flag and the variable: electrs' names, renamed OSPREY_.
            let long = key.replace('_', "-");
            let arg = command
                .get_arguments()
                .find(|arg| arg.get_long() == Some(long.as_str()))
                .unwrap_or_else(|| panic!("no --{long}"));
            let env = arg.get_env().and_then(|e| e.to_str()).unwrap_or_default();
            assert_eq!(env, format!("OSPREY_{}", key.to_uppercase()), "{key}");
            let text = match (*key, sample) {
                (_, "flag only") => continue,
                ("auth", _) => "auth = \"user:pass\"\n".to_string(),
                _ => format!("{key} = {sample}\n"),
            };
            let config = from_toml(&text).unwrap_or_else(|e| panic!("{text}: {e:#}"));
            let warned: Vec<&String> = config.warnings.iter().filter(|w| w.contains(key)).collect();
            match what {
                electrs::Electrs::Ignored(_) => {
                    assert_eq!(config.warnings.len(), 1, "{text}: {:?}", config.warnings);
                    assert!(
                        warned[0].starts_with(&format!("{key} (an electrs setting) is ignored: "))
                    );
                }
                _ => assert_eq!(config.warnings, Vec::<String>::new(), "{text}"),
            }
        }
        // electrs' flag form of `auto_reindex = false`: no rebuild after a
        // format change; and `auto_reindex` in a file says the same.
        let matches = command
            .clone()
            .try_get_matches_from(["osprey", "--no-auto-reindex", "-vv"])
            .unwrap();
        let args = <ConfigArgs as clap::FromArgMatches>::from_arg_matches(&matches).unwrap();
        assert_eq!((args.no_auto_reindex, args.verbose), (true, 2));
        let config = args.over(ConfigArgs::default()).unwrap();
        assert!(!config.reindex_on_format_change);
        assert_eq!(config.warnings.len(), 1, "{:?}", config.warnings);
        assert!(
            config.warnings[0].starts_with("verbose "),
            "{:?}",
            config.warnings
        );
        for (text, rebuilds) in [
            ("auto_reindex = false\n", false),
            ("auto_reindex = true\n", true),
        ] {
            assert_eq!(
                from_toml(text).unwrap().reindex_on_format_change,
                rebuilds,
                "{text}"
            );
        }
        let err = from_toml("auto_reindex = true\nreindex_on_format_change = false\n").unwrap_err();
        assert!(format!("{err:#}").contains("disagree"), "{err:#}");
    }

    #[test]
    fn electrs_switches_parse_under_osprey_serve() {
        use clap::Parser as _;
        let cli = crate::Cli::try_parse_from([
            "osprey",
            "serve",
            "--version",
            "-vv",
            "--sync-once",
            "--no-auto-reindex",
            "--index-lookup-limit",
            "0",
        ])
        .unwrap_or_else(|e| panic!("{e}"));
        let crate::Command::Serve(args) = cli.command else {
            panic!("not serve");
        };
        assert!(args.version && args.sync_once && args.no_auto_reindex);
        let c = args.over(ConfigArgs::default()).unwrap();
        assert!(c.sync_once);
        assert_eq!(c.history_entries_max, usize::MAX);
        let ignored: Vec<&str> = c
            .warnings
            .iter()
            .map(|w| w.split(' ').next().unwrap())
            .collect();
        assert_eq!(ignored, ["verbose", "version"]);
    }

    #[test]
    fn electrs_names_convert_and_must_agree_with_osprey_names() {
        let c = from_toml("index_lookup_limit = 0\nwait_duration_secs = 10\nserver_banner = \"hi\"\nlog_filters = \"DEBUG\"\n").unwrap();
        assert_eq!(c.history_entries_max, usize::MAX, "electrs' 0 is no limit");
        assert_eq!(c.poll_interval_ms, 10_000);
        assert_eq!((c.banner.as_str(), c.log_filter.as_str()), ("hi", "DEBUG"));
        let c = from_toml("index_lookup_limit = 7\nhistory_entries_max = 7\n").unwrap();
        assert_eq!(c.history_entries_max, 7, "the same value under both names");
        let err = format!(
            "{:#}",
            from_toml("banner = \"a\"\nserver_banner = \"b\"\n").unwrap_err()
        );
        assert!(
            err.contains("banner (\"a\") and electrs' server_banner"),
            "{err}"
        );
        let err = format!(
            "{:#}",
            from_toml("poll_interval_ms = 500\nwait_duration_secs = 1\n").unwrap_err()
        );
        assert!(err.contains("disagree"), "{err}");
        // A flag of either name overrides the file's.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("electrs.toml");
        std::fs::write(&path, "server_banner = \"file\"\n").unwrap();
        let mut a = args(Some(&path));
        a.banner = Some("flag".into());
        assert_eq!(a.resolve().unwrap().banner, "flag");
        // electrs resolves host names in its listening addresses.
        let c = from_toml("electrum_rpc_addr = \"localhost:50001\"\n").unwrap();
        assert_eq!(c.electrum_rpc_addr.port(), 50001);
    }

    #[test]
    fn typos_among_electrs_names_still_fail() {
        let err = format!("{:#}", from_toml("server_baner = \"hi\"\n").unwrap_err());
        assert!(err.contains("server_baner"), "{err}");
        let err = format!(
            "{:#}",
            from_toml("daemon_p2p_adr = \"127.0.0.1:8333\"\n").unwrap_err()
        );
        assert!(err.contains("daemon_p2p_adr"), "{err}");
    }

    #[test]
    fn conf_dir_files_are_read_in_name_order_under_conf() {
        let dir = tempfile::tempdir().unwrap();
        let conf_dir = dir.path().join("conf.d");
        std::fs::create_dir(&conf_dir).unwrap();
        std::fs::write(
            conf_dir.join("a.toml"),
            "banner = \"a\"\nsessions_max = 5\nnetwork = \"regtest\"\n",
        )
        .unwrap();
        std::fs::write(conf_dir.join("b.toml"), "banner = \"b\"\n").unwrap();
        let conf = dir.path().join("osprey.toml");
        std::fs::write(&conf, "sessions_max = 9\n").unwrap();
        let mut a = args(Some(&conf));
        a.conf_dir = Some(conf_dir.clone());
        let c = a.resolve().unwrap();
        assert_eq!(
            (c.banner.as_str(), c.sessions_max, c.network),
            ("b", 9, Network::Regtest)
        );
        std::fs::write(conf_dir.join("c.toml"), "banerr = 1\n").unwrap();
        let err = format!("{:#}", a.resolve().unwrap_err());
        assert!(err.contains("c.toml") && err.contains("banerr"), "{err}");
    }

    #[test]
    fn an_electrs_index_in_db_dir_is_left_alone_and_reported() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("regtest")).unwrap();
        std::fs::write(dir.path().join("regtest/CURRENT"), "MANIFEST-000001\n").unwrap();
        let mut a = args(None);
        a.network = Some("regtest".into());
        a.db_dir = Some(dir.path().into());
        a.skip_default_conf_files = true;
        let warnings = a.resolve().unwrap().warnings;
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(
            warnings[0].contains("holds an electrs index"),
            "{warnings:?}"
        );
    }

    /// The environment Umbrel's electrs app passes (getumbrel/umbrel-apps
    /// `electrs/docker-compose.yml` at 0346a208, for electrs 0.9.4, the
    /// newest there that names the cookie file), `ELECTRS_` renamed
    /// `OSPREY_` and its `${...}` filled in. Checked in a child process
    /// with only these variables, as the environment is process-wide.
    const UMBREL_ENV: &[(&str, &str)] = &[
        ("OSPREY_LOG_FILTERS", "INFO"),
        ("OSPREY_NETWORK", "bitcoin"),
        ("OSPREY_DAEMON_RPC_ADDR", "10.21.21.8:8332"),
        ("OSPREY_DAEMON_P2P_ADDR", "10.21.21.8:8333"),
        ("OSPREY_ELECTRUM_RPC_ADDR", "0.0.0.0:50001"),
        ("OSPREY_SERVER_BANNER", "Umbrel Electrs (v0.9.4)"),
        ("OSPREY_DB_DIR", "/data/db"),
        ("OSPREY_COOKIE_FILE", "/data/.bitcoin/.cookie"),
    ];

    #[test]
    fn a_node_packages_environment_starts_osprey() {
        const CHILD: &str = "OSPREY_CONFIG_TEST_CHILD";
        if std::env::var_os(CHILD).is_none() {
            let out = std::process::Command::new(std::env::current_exe().unwrap())
                .args([
                    "--exact",
                    "config::tests::a_node_packages_environment_starts_osprey",
                    "--nocapture",
                ])
                .env_clear()
                .envs(UMBREL_ENV.iter().copied())
                .env(CHILD, "1")
                .output()
                .unwrap();
            let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
            assert!(out.status.success(), "{text}");
            assert!(text.contains("1 passed"), "the child ran this test: {text}");
            return;
        }
        use clap::{Args as _, FromArgMatches as _};
        // RaspiBlitz's one flag (raspiblitz/raspiblitz
        // home.admin/config.scripts/bonus.electrs.sh, its systemd unit).
        let matches = ConfigArgs::augment_args(clap::Command::new("osprey"))
            .try_get_matches_from(["osprey", "--electrum-rpc-addr=0.0.0.0:50002"])
            .unwrap();
        let c = ConfigArgs::from_arg_matches(&matches)
            .unwrap()
            .over(ConfigArgs::default())
            .unwrap();
        assert_eq!(c.network, Network::Bitcoin);
        assert_eq!(c.db_path, PathBuf::from("/data/db/bitcoin"));
        assert_eq!(
            c.electrum_rpc_addr,
            "0.0.0.0:50002".parse().unwrap(),
            "the flag over the variable"
        );
        assert_eq!(
            (c.banner.as_str(), c.log_filter.as_str()),
            ("Umbrel Electrs (v0.9.4)", "INFO")
        );
        match &c.chain {
            ChainConfig::Node { rpc_addr, auth, .. } => {
                assert_eq!(rpc_addr, "10.21.21.8:8332");
                assert!(
                    matches!(auth, osprey_chain::rpc::Auth::CookieFile(p) if p == Path::new("/data/.bitcoin/.cookie")),
                    "{auth:?}"
                );
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
        assert!(c.warnings[0].starts_with("daemon_p2p_addr (an electrs setting) is ignored"));
    }

    #[test]
    fn readme_lists_every_electrs_setting() {
        let readme = include_str!("../README.md");
        let section = readme
            .split("\n### Replacing electrs\n")
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .expect("README has a Replacing electrs section");
        let mut listed: Vec<&str> = section
            .lines()
            .filter_map(|line| line.strip_prefix("| `"))
            .filter_map(|rest| rest.split('`').next())
            .collect();
        let mut known: Vec<&str> = electrs::SETTINGS.iter().map(|(key, _)| *key).collect();
        listed.sort_unstable();
        known.sort_unstable();
        assert_eq!(
            listed, known,
            "README's Replacing electrs rows vs electrs::SETTINGS"
        );
    }
}
