//! The settings as given: one field per setting, from which clap makes its
//! flag and environment variable and serde its key in the TOML file.

use clap::Args;
use serde::Deserialize;
use std::path::PathBuf;

/// Flags of `osprey serve` and `osprey index`; each can also be set as an
/// `OSPREY_<NAME>` environment variable or in the TOML config file, whose
/// keys are these fields' names. Switches take electrs' values in
/// variables (`1`/`0` as well as `true`/`false`).
#[derive(Args, Deserialize, Debug, Default, Clone)]
#[serde(deny_unknown_fields)]
pub struct ConfigArgs {
    /// TOML config file, read where this flag appears on the command line
    /// (flags after it override it) [default: ./osprey.toml if it exists]
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
    #[arg(long, env = "OSPREY_REINDEX", value_parser = clap::builder::BoolishValueParser::new())]
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
    /// Labels one silent-payments subscription may scan besides the change
    /// label [default: 10]
    #[arg(long, env = "OSPREY_SP_LABELS_MAX")]
    pub sp_labels_max: Option<usize>,
    /// CPU priority of silent-payment scans: idle (only CPU nothing else
    /// wants; nice 19 for a minute after a chunk waited 3 s), low (nice 19)
    /// or normal (the wallets' own) [default: idle]
    #[arg(long, env = "OSPREY_SP_SCAN_PRIORITY")]
    pub sp_scan_priority: Option<String>,
    /// Silent-payment addresses one session may subscribe [default: 10]
    #[arg(long, env = "OSPREY_SP_SUBSCRIPTIONS_PER_SESSION_MAX")]
    pub sp_subscriptions_per_session_max: Option<usize>,
    /// Concurrent client sessions [default: 1000]
    #[arg(long, env = "OSPREY_SESSIONS_MAX")]
    pub sessions_max: Option<usize>,
    /// Blocks below the tip that can be undone without a reindex [default: 1000]
    #[arg(long, env = "OSPREY_REORG_DEPTH_MAX")]
    pub reorg_depth_max: Option<u32>,
    /// How often to poll the node for new blocks and mempool changes [default: 1000]
    #[arg(long, env = "OSPREY_POLL_INTERVAL_MS")]
    pub poll_interval_ms: Option<u64>,
    /// Longest wait, in seconds, between checks for room after the disk of
    /// the index filled up; checks start at 1 s and double [default: 60]
    #[arg(long, env = "OSPREY_DISK_FULL_RETRY_MAX_SECS")]
    pub disk_full_retry_max_secs: Option<u64>,
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
    /// Where a load balancer sending PROXY protocol headers (v1 or v2)
    /// connects from, comma-separated CIDR: connections from there must
    /// start with one and count as the client it names; a header from
    /// anywhere else closes the connection. Unset: no proxy
    #[arg(long, env = "OSPREY_PROXY_PROTOCOL_FROM")]
    pub proxy_protocol_from: Option<String>,
    /// Leading bits of an IPv6 address that name one client for
    /// --sessions-per-ip-max and add_peer's rate limit, 32 to 128
    /// [default: 64]
    #[arg(long, env = "OSPREY_IPV6_PREFIX_BITS")]
    pub ipv6_prefix_bits: Option<u8>,
    /// Threads that index and answer wallets [default: the cores available]
    #[arg(long, env = "OSPREY_WORKER_THREADS")]
    pub worker_threads: Option<usize>,
    /// RocksDB's block cache in MiB: more keeps more of the index in memory
    /// for wallets' lookups [default: 256]
    #[arg(long, env = "OSPREY_DB_CACHE_MB")]
    pub db_cache_mb: Option<usize>,
    /// Benchmarks only: divide every size that shapes the index's LSM
    /// (write buffers, file and level sizes, the block cache, the
    /// indexer's batches) by this, so that a small chain builds the LSM a
    /// chain this many times bigger would [default: 1]
    #[arg(long, env = "OSPREY_LSM_SCALE")]
    pub lsm_scale: Option<u32>,
    /// Rebuild the index by itself when it was written in another format
    /// (after an upgrade or a downgrade); false: refuse to start instead
    /// [default: true]
    #[arg(long, env = "OSPREY_REINDEX_ON_FORMAT_CHANGE", value_parser = clap::builder::BoolishValueParser::new())]
    pub reindex_on_format_change: Option<bool>,
    /// Keep BIP-352 silent-payment records, which wallets such as Sparrow
    /// scan (about 100 bytes per eligible transaction); changing it
    /// rebuilds the index [default: false]
    #[arg(
        long,
        env = "OSPREY_SILENT_PAYMENTS",
        value_parser = clap::builder::BoolishValueParser::new(),
        num_args = 0..=1,
        default_missing_value = "true"
    )]
    pub silent_payments: Option<bool>,
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
    /// Also read every file in this directory, in name order, where this
    /// flag appears on the command line (electrs' --conf-dir)
    #[arg(long, env = "OSPREY_CONF_DIR")]
    #[serde(skip)]
    pub conf_dir: Option<PathBuf>,
    /// Do not read electrs' default files nor ./osprey.toml (electrs'
    /// --skip-default-conf-files)
    #[arg(long, env = "OSPREY_SKIP_DEFAULT_CONF_FILES", value_parser = clap::builder::BoolishValueParser::new())]
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
    #[arg(long, env = "OSPREY_SYNC_ONCE", hide = true, value_parser = clap::builder::BoolishValueParser::new())]
    #[serde(default)]
    pub sync_once: bool,
    #[arg(short = 'v', long, env = "OSPREY_VERBOSE", action = clap::ArgAction::Count, hide = true)]
    #[serde(default)]
    pub verbose: u8,
    #[arg(long, env = "OSPREY_TIMESTAMP", hide = true, value_parser = clap::builder::BoolishValueParser::new())]
    #[serde(default)]
    pub timestamp: bool,
    /// `auto_reindex = true|false` in the file, `--auto-reindex BOOL`
    #[arg(long, env = "OSPREY_AUTO_REINDEX", hide = true, value_parser = clap::builder::BoolishValueParser::new())]
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
    #[arg(long, env = "OSPREY_IGNORE_MEMPOOL", hide = true, value_parser = clap::builder::BoolishValueParser::new())]
    #[serde(default)]
    pub ignore_mempool: bool,
    #[arg(long, env = "OSPREY_DISABLE_ELECTRUM_RPC", hide = true, value_parser = clap::builder::BoolishValueParser::new())]
    #[serde(default)]
    pub disable_electrum_rpc: bool,
    #[arg(long, env = "OSPREY_SKIP_BLOCK_DOWNLOAD_WAIT", hide = true, value_parser = clap::builder::BoolishValueParser::new())]
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
    #[arg(long, env = "OSPREY_JSONRPC_IMPORT", hide = true, value_parser = clap::builder::BoolishValueParser::new())]
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
