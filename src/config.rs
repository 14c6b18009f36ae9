//! The one `Config`: per-network defaults, overridden by the config
//! files, then by environment variables, then by flags, in electrs' order
//! (see [`resolve`]). Raw input is parsed here and validated into the
//! types the program runs on, so a typo fails at startup with a message
//! naming the key.
//!
//! Every setting is declared once, as a field of [`ConfigArgs`] (`args`):
//! its flag, its environment variable and its TOML key (the same struct is
//! what the file deserializes into) all come from that field. Then, each
//! step in its own module: where each layer of settings came from
//! (`sources`), the files read (`files`), electrs' names folded into
//! Osprey's (`electrs`), the layers combined (`layers`), and the result
//! checked into a [`Config`] with the defaults filled in (`validate`).
//! Defaults of limits come from the crates that enforce them (`Limits`,
//! `QueryConfig`, `StoreConfig`). A test checks that the README's table
//! says the same.

mod args;
mod electrs;
mod files;
mod layers;
mod sources;
mod validate;

use anyhow::Context as _;
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
    pub sp_scan_priority: osprey_server::ScanPriority,
    pub sp_subscriptions_per_session_max: usize,
    pub sessions_max: usize,
    pub reorg_depth_max: u32,
    pub poll_interval_ms: u64,
    /// Longest wait between checks for room once the index's disk is full.
    pub disk_full_retry_max_secs: u64,
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
    /// Divides the sizes that shape the LSM ([`StoreConfig::lsm_scale`]).
    pub lsm_scale: u32,
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
    /// `osprey serve --read-only`: serve the index another `osprey serve`
    /// writes in `db_path`, writing nothing. A flag of `serve`, not a
    /// setting: writer and replicas read one config file.
    pub read_only: bool,
    /// One line per setting that was accepted but is not honoured, for
    /// the caller to log once logging is up.
    pub warnings: Vec<String>,
}

/// How Osprey was started, which decides whose files `--conf` and
/// `--conf-dir` name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launch {
    /// With a subcommand (`osprey serve --conf FILE`): the files are
    /// Osprey's, and an unknown key in one stops startup.
    Osprey,
    /// Without one, as a node package starts electrs (`osprey --conf
    /// FILE`): the files are electrs', whose unknown keys electrs
    /// ignores, so each gets a warning instead.
    Electrs,
}

/// One layer of settings.
#[derive(Debug)]
enum Source {
    /// Settings given directly: variables or flags.
    Settings(Box<ConfigArgs>),
    /// A config file.
    File(PathBuf, files::UnknownKeys),
    /// Every file of a directory, in name order.
    Dir(PathBuf, files::UnknownKeys),
}

/// The configuration of the subcommand whose settings `args` are, parsed
/// (with its variables) into `matches`, started as `launch` says. Lowest
/// precedence first: defaults; electrs' default files; `./osprey.toml`;
/// `OSPREY_CONF_DIR` and `OSPREY_CONF`; `ELECTRS_*` variables; `OSPREY_*`
/// variables; the command line from left to right, `--conf` and
/// `--conf-dir` where they appear on it.
///
/// # Errors
/// A missing or malformed config file, an unknown key in one of Osprey's
/// files, or a value that does not parse, each named in the message.
pub fn resolve(
    args: &ConfigArgs,
    matches: &clap::ArgMatches,
    launch: Launch,
) -> anyhow::Result<Config> {
    let (sources, skip_default_files, conf_given) = sources::from_matches(args, matches, launch)?;
    let mut config = resolve_sources(sources, skip_default_files, conf_given)?;
    if launch == Launch::Electrs && config.monitoring_addr.is_none() {
        // A package's health check may ask electrs' metrics port.
        let electrs_addr = electrs::default_monitoring_addr(config.network);
        electrs::add_difference(
            &mut config.warnings,
            &format!("monitoring_addr is unset: electrs serves its metrics on {electrs_addr} then, Osprey serves none (set monitoring_addr to serve them)"),
        );
    }
    Ok(config)
}

impl ConfigArgs {
    /// Layers these settings over `file`'s, then over the defaults.
    ///
    /// # Errors
    /// As [`resolve`], without the files.
    pub fn over(&self, file: ConfigArgs) -> anyhow::Result<Config> {
        layered(
            vec![
                (file, "the config file".to_string()),
                (self.clone(), "the flags".to_string()),
            ],
            Vec::new(),
        )
    }
}

/// The default files under `sources`, read, folded and validated.
fn resolve_sources(
    sources: Vec<Source>,
    skip_default_files: bool,
    conf_given: bool,
) -> anyhow::Result<Config> {
    let mut all = Vec::new();
    if !skip_default_files {
        for path in files::electrs_default_files() {
            if path.is_file() {
                all.push(Source::File(path, files::UnknownKeys::Warned));
            }
        }
        // Osprey's own default file, over electrs': a file written for
        // Osprey says what the operator wants of Osprey.
        let osprey = PathBuf::from("osprey.toml");
        if !conf_given && osprey.is_file() {
            all.push(Source::File(osprey, files::UnknownKeys::Refused));
        }
    }
    all.extend(sources);
    let mut warnings = Vec::new();
    let mut layers = Vec::new();
    let mut read = |path: &std::path::Path, unknown| -> anyhow::Result<(ConfigArgs, String)> {
        let layer = files::read_file(path, unknown, &mut warnings)?;
        Ok((layer, format!("config file {}", path.display())))
    };
    for source in all {
        match source {
            Source::Settings(settings) => {
                layers.push((*settings, "the variables or flags".to_string()));
            }
            Source::File(path, unknown) => layers.push(read(&path, unknown)?),
            Source::Dir(dir, unknown) => {
                for path in files::files_in(&dir)? {
                    layers.push(read(&path, unknown)?);
                }
            }
        }
    }
    // A file read twice (Parmanode's `--conf ~/.electrs/config.toml`,
    // which electrs reads by default too) warns once.
    let mut once = Vec::new();
    for warning in warnings {
        if !once.contains(&warning) {
            once.push(warning);
        }
    }
    layered(layers, once)
}

/// `layers` (lowest first, each with where it came from), electrs' names
/// folded into Osprey's in each, combined and validated; `warnings` go
/// first.
fn layered(layers: Vec<(ConfigArgs, String)>, warnings: Vec<String>) -> anyhow::Result<Config> {
    let mut combined = ConfigArgs::default();
    for (layer, origin) in layers {
        let layer = layer.electrs_names_folded().context(origin)?;
        combined = layer.layered_over(combined);
    }
    let mut config = validate::validate(combined)?;
    config.warnings.splice(0..0, warnings);
    config
        .warnings
        .extend(electrs::index_warning(&config.db_path));
    Ok(config)
}

#[cfg(test)]
mod tests;
