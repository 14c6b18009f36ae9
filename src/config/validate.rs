//! From the layered settings to the [`Config`] the program runs on: the
//! defaults filled in, every value parsed and checked, so that a bad one
//! fails at startup with a message naming its key.

use super::files::home_dir;
use super::{electrs, ChainConfig, Config, ConfigArgs};
use anyhow::{bail, Context};
use osprey_core::Network;
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};

/// Validates `settings`, the layers already combined and electrs' names
/// folded into Osprey's.
///
/// # Errors
/// A value that does not parse or is out of range, named in the message.
pub(super) fn validate(settings: ConfigArgs) -> anyhow::Result<Config> {
    // Defaults of limits come from the crates that enforce them.
    let limits = osprey_server::Limits::default();
    let query = osprey_query::QueryConfig::default();
    let store = osprey_store::StoreConfig::default();
    let warnings: Vec<String> = electrs::differences_warning(&settings)
        .into_iter()
        .collect();
    let network: Network = match &settings.network {
        Some(name) => name
            .parse()
            .map_err(anyhow::Error::msg)
            .context("network")?,
        None => Network::Bitcoin,
    };
    let chain = chain(&settings, network)?;
    let db_dir = settings.db_dir.unwrap_or_else(|| PathBuf::from("db"));
    let electrum = settings
        .electrum_rpc_addr
        .unwrap_or_else(|| format!("127.0.0.1:{}", network.default_electrum_port()));
    let electrum_tls_addr = optional_addr("electrum_tls_addr", settings.electrum_tls_addr)?;
    let electrum_wss_addr = optional_addr("electrum_wss_addr", settings.electrum_wss_addr)?;
    let tls_listener = electrum_tls_addr.is_some() || electrum_wss_addr.is_some();
    Ok(Config {
        network,
        db_path: db_dir.join(network.name()),
        chain,
        electrum_rpc_addr: resolve_addr("electrum_rpc_addr", &electrum)?,
        log_filter: settings.log_filter.unwrap_or_else(|| "info".into()),
        reindex: settings.reindex,
        history_entries_max: positive(
            "history_entries_max",
            settings
                .history_entries_max
                .unwrap_or(query.history_entries_max),
        )?,
        line_bytes_max: positive(
            "line_bytes_max",
            settings.line_bytes_max.unwrap_or(limits.line_bytes_max),
        )?,
        reply_bytes_max: positive(
            "reply_bytes_max",
            settings.reply_bytes_max.unwrap_or(limits.reply_bytes_max),
        )?,
        batch_requests_max: positive(
            "batch_requests_max",
            settings
                .batch_requests_max
                .unwrap_or(limits.batch_requests_max),
        )?,
        subscriptions_per_session_max: positive(
            "subscriptions_per_session_max",
            settings
                .subscriptions_per_session_max
                .unwrap_or(limits.subscriptions_per_session_max),
        )?,
        sp_labels_max: settings.sp_labels_max.unwrap_or(limits.sp_labels_max),
        sp_scan_priority: match settings.sp_scan_priority.as_deref() {
            None => limits.sp_scan_priority,
            Some(name) => osprey_server::ScanPriority::from_name(name).with_context(|| {
                format!(
                    "sp_scan_priority {name:?}: expected {}",
                    osprey_server::ScanPriority::NAMES.join(", ")
                )
            })?,
        },
        sp_subscriptions_per_session_max: positive(
            "sp_subscriptions_per_session_max",
            settings
                .sp_subscriptions_per_session_max
                .unwrap_or(limits.sp_subscriptions_per_session_max),
        )?,
        sessions_max: positive(
            "sessions_max",
            settings.sessions_max.unwrap_or(limits.sessions_max),
        )?,
        reorg_depth_max: settings.reorg_depth_max.unwrap_or(store.reorg_depth_max),
        poll_interval_ms: settings.poll_interval_ms.unwrap_or(1000).max(10),
        disk_full_retry_max_secs: settings.disk_full_retry_max_secs.unwrap_or(60).max(1),
        banner: settings
            .banner
            .unwrap_or_else(|| "Welcome to Osprey".into()),
        client_memory_bytes_max: settings
            .client_memory_bytes_max
            .unwrap_or(limits.client_memory_bytes_max),
        public_hosts: host_list("public_hosts", settings.public_hosts)?,
        peers: peer_list(settings.peers)?,
        sessions_per_ip_max: positive(
            "sessions_per_ip_max",
            settings
                .sessions_per_ip_max
                .unwrap_or(limits.sessions_per_ip_max),
        )?,
        trusted_subnets: match settings.trusted_subnets {
            Some(list) => subnet_list("trusted_subnets", &list)?,
            None => limits.trusted_subnets,
        },
        proxy_protocol_from: match settings.proxy_protocol_from {
            Some(list) => subnet_list("proxy_protocol_from", &list)?,
            None => limits.proxy_protocol_from,
        },
        ipv6_prefix_bits: match settings.ipv6_prefix_bits.unwrap_or(limits.ipv6_prefix_bits) {
            bits @ 32..=128 => bits,
            bits => bail!("ipv6_prefix_bits must be 32 to 128, got {bits}"),
        },
        worker_threads: positive(
            "worker_threads",
            settings.worker_threads.unwrap_or(limits.worker_threads),
        )?,
        db_cache_bytes: positive(
            "db_cache_mb",
            settings.db_cache_mb.unwrap_or(store.cache_bytes >> 20),
        )?
        .checked_mul(1 << 20)
        .context("db_cache_mb is too large")?,
        lsm_scale: match settings.lsm_scale.unwrap_or(store.lsm_scale) {
            0 => bail!("lsm_scale must be at least 1"),
            scale => scale,
        },
        reindex_on_format_change: settings.reindex_on_format_change.unwrap_or(true),
        silent_payments: settings.silent_payments.unwrap_or(store.silent_payments),
        electrum_tls_addr,
        electrum_ws_addr: optional_addr("electrum_ws_addr", settings.electrum_ws_addr)?,
        electrum_wss_addr,
        tls: tls(
            settings.tls_cert_file,
            settings.tls_key_file,
            &db_dir,
            tls_listener,
        )?,
        monitoring_addr: settings
            .monitoring_addr
            .map(|addr| resolve_addr("monitoring_addr", &addr))
            .transpose()?,
        sync_once: settings.sync_once,
        read_only: false,
        warnings,
    })
}

/// Where the chain comes from: blk files, or a node and how to reach it.
fn chain(settings: &ConfigArgs, network: Network) -> anyhow::Result<ChainConfig> {
    let block_source = match settings.block_source.as_deref() {
        None | Some("auto") => osprey_chain::BlockSourceChoice::Auto,
        Some("files") => osprey_chain::BlockSourceChoice::Only(osprey_chain::BlockSource::Files),
        Some("rest") => osprey_chain::BlockSourceChoice::Only(osprey_chain::BlockSource::Rest),
        Some("rpc") => osprey_chain::BlockSourceChoice::Only(osprey_chain::BlockSource::Rpc),
        Some(other) => bail!("block_source {other:?}: expected auto, files, rest or rpc"),
    };
    if let Some(dir) = &settings.blocks_dir {
        return Ok(ChainConfig::BlkFiles { dir: dir.clone() });
    }
    let rpc_addr = settings
        .daemon_rpc_addr
        .clone()
        .unwrap_or_else(|| format!("127.0.0.1:{}", network.default_daemon_rpc_port()));
    // The node's directory for this network: its cookie and its blocks.
    let network_dir = settings
        .daemon_dir
        .clone()
        .or_else(|| home_dir().map(|home| home.join(".bitcoin")))
        .map(|dir| match network.daemon_subdir() {
            Some(sub) => dir.join(sub),
            None => dir,
        });
    let auth = match (settings.auth.as_deref(), &settings.cookie_file) {
        (Some(_), Some(_)) => bail!("give either auth or cookie_file, not both"),
        (Some(auth), None) => {
            let (user, pass) = auth.split_once(':').context("auth must be USER:PASSWORD")?;
            osprey_chain::rpc::Auth::UserPass(user.to_string(), pass.to_string())
        }
        (None, Some(cookie)) => osprey_chain::rpc::Auth::CookieFile(cookie.clone()),
        (None, None) => osprey_chain::rpc::Auth::CookieFile(
            network_dir
                .as_ref()
                .context("cannot find the home directory; set --daemon-dir")?
                .join(".cookie"),
        ),
    };
    Ok(ChainConfig::Node {
        rpc_addr,
        auth,
        block_source,
        blocks_dir: network_dir.map(|dir| dir.join("blocks")),
    })
}

/// The TLS listeners' certificate and key: the files given, or a
/// self-signed pair kept in `db_dir` when a TLS listener is on.
fn tls(
    cert_file: Option<PathBuf>,
    key_file: Option<PathBuf>,
    db_dir: &Path,
    tls_listener: bool,
) -> anyhow::Result<Option<osprey_server::TlsFiles>> {
    Ok(match (cert_file, key_file) {
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
    })
}

fn positive(name: &str, value: usize) -> anyhow::Result<usize> {
    if value == 0 {
        bail!("{name} must be at least 1");
    }
    Ok(value)
}

/// A listener that is off unless given: an `IP:PORT` address.
fn optional_addr(name: &str, value: Option<String>) -> anyhow::Result<Option<SocketAddr>> {
    value
        .map(|v| {
            v.parse::<SocketAddr>()
                .with_context(|| format!("{name} {v:?} is not an IP:PORT address"))
        })
        .transpose()
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

/// Parses the setting `name`: comma-separated CIDR networks.
fn subnet_list(name: &str, list: &str) -> anyhow::Result<Vec<osprey_server::Subnet>> {
    list.split(',')
        .filter(|item| !item.trim().is_empty())
        .map(|item| {
            item.parse()
                .map_err(|e: String| anyhow::anyhow!("{name}: {e}"))
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
