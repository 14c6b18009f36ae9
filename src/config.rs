//! The one `Config`: per-network defaults, overridden by the TOML file, then
//! by `OSPREY_*` environment variables, then by flags. Raw input is parsed
//! here and validated into the types the program runs on, so a typo fails
//! at startup with a message naming the key.
//!
//! Every setting is declared once, as a field of [`ConfigArgs`] (`args`):
//! its flag, its environment variable and its TOML key (the same struct is
//! what the file deserializes into) all come from that field. Then, each
//! step in its own module: the files read (`files`), electrs' names folded
//! into Osprey's (`electrs`), the layers combined (`layers`), and the
//! result checked into a [`Config`] with the defaults filled in
//! (`validate`). Defaults of limits come from the crates that enforce them
//! (`Limits`, `QueryConfig`, `StoreConfig`). A test checks that the
//! README's table says the same.

mod args;
mod electrs;
mod files;
mod layers;
mod validate;

pub use args::ConfigArgs;
use osprey_core::Network;
use std::net::SocketAddr;
use std::path::PathBuf;

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
    pub sp_labels_max: usize,
    pub sp_subscriptions_per_session_max: usize,
    pub sessions_max: usize,
    pub reorg_depth_max: u32,
    pub poll_interval_ms: u64,
    pub banner: String,
    pub client_memory_bytes_max: usize,
    pub public_hosts: Vec<osprey_server::PublicHost>,
    pub peers: Vec<osprey_server::PublicHost>,
    pub sessions_per_ip_max: usize,
    pub trusted_subnets: Vec<osprey_server::Subnet>,
    /// Where PROXY protocol headers are honoured from (and required).
    pub proxy_protocol_from: Vec<osprey_server::Subnet>,
    pub ipv6_prefix_bits: u8,
    pub worker_threads: usize,
    /// RocksDB's block cache.
    pub db_cache_bytes: usize,
    pub reindex_on_format_change: bool,
    /// The index keeps silent-payment records (part of its format).
    pub silent_payments: bool,
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
    /// Layers flags and environment over the config files over defaults.
    ///
    /// # Errors
    /// A missing or malformed config file, an unknown key, or a value that
    /// does not parse, each named in the message.
    pub fn resolve(&self) -> anyhow::Result<Config> {
        let files = self.config_files()?;
        let mut config = self.over(files::read_files(&files)?)?;
        if !self.skip_default_conf_files {
            let read: Vec<PathBuf> = files.iter().filter_map(|p| p.canonicalize().ok()).collect();
            config
                .warnings
                .extend(electrs::default_files_warnings(&read));
        }
        config
            .warnings
            .extend(electrs::index_warning(&config.db_path));
        Ok(config)
    }

    /// Layers these settings over `file`'s, then over the defaults.
    ///
    /// # Errors
    /// As [`ConfigArgs::resolve`], without the file.
    pub fn over(&self, file: ConfigArgs) -> anyhow::Result<Config> {
        let flags = self.clone().electrs_names_folded()?;
        validate::validate(flags.layered_over(file.electrs_names_folded()?))
    }
}

#[cfg(test)]
mod tests;
