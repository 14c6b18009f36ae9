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
            monitoring_addr,
        })
    }
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
            "monitoring_addr" => config
                .monitoring_addr
                .map_or_else(|| "off".to_string(), |addr| addr.to_string()),
            "block_source" => match &config.chain {
                ChainConfig::Node {
                    block_source: osprey_chain::BlockSourceChoice::Auto,
                    ..
                } => "auto".to_string(),
                other => format!("{other:?}"),
            },
            "conf" | "db_dir" | "daemon_dir" | "daemon_rpc_addr" | "cookie_file" | "auth"
            | "blocks_dir" | "electrum_rpc_addr" | "reindex" => return None,
            other => panic!("setting {other} is new: say here what its default resolves to"),
        })
    }

    #[test]
    fn settings_agree_with_the_readme() {
        use clap::Args as _;
        let readme = include_str!("../README.md");
        let section = readme
            .split("\n## Configuration\n")
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .expect("README has a Configuration section");
        let rows: Vec<Vec<String>> = section
            .lines()
            .filter(|line| line.starts_with("| `--"))
            .map(|line| {
                line.trim_matches('|')
                    .split(" | ")
                    .map(|cell| cell.trim().trim_matches('`').to_string())
                    .collect()
            })
            .collect();
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
