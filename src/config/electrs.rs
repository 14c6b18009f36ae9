//! What Osprey does with each setting of electrs, so that electrs' config
//! file, flags and `ELECTRS_*` variables (renamed `OSPREY_*`) start Osprey.
//!
//! Sources (romanz/electrs at 1222d361, the tree released as 0.12.0, see
//! `tests/data/electrs/README.md`): `internal/config_specification.toml`
//! for the keys, `src/config.rs` for their meanings; keys that earlier
//! releases had come from the v0.9.0, v0.10.0 and v0.11.1 specs and from
//! `doc/upgrading.md` (options electrs 0.9 removed); the files it reads
//! and their precedence from `src/config.rs` and Kixunil/configure_me's
//! generated `including_optional_config_files`. Packages that pass
//! them: getumbrel/umbrel-apps `electrs/docker-compose.yml` (`ELECTRS_*`
//! variables), Start9Labs/electrs-startos `startos/fileModels/electrs.toml.ts`
//! (a TOML file) and raspiblitz/raspiblitz
//! `home.admin/config.scripts/bonus.electrs.sh` (a TOML file and a flag).

use super::ConfigArgs;
use anyhow::bail;
use std::fmt::Debug;
use std::path::Path;

/// What Osprey does with one electrs setting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Electrs {
    /// Osprey's setting of the same name, with the same meaning.
    Same,
    /// Osprey's setting of another name, with the same meaning; how the
    /// value converts, if it does.
    Alias {
        osprey: &'static str,
        conversion: &'static str,
    },
    /// Honoured by Osprey as said.
    Honoured(&'static str),
    /// Accepted and ignored, with one warning at startup saying what Osprey
    /// does instead.
    Ignored(&'static str),
}

/// Every setting of electrs 0.12, then those earlier releases had, with
/// what Osprey does with it. Flags are `--` and the key with `-` for `_`;
/// variables are `OSPREY_` and the key in upper case.
pub const SETTINGS: &[(&str, Electrs)] = &[
    (
        "verbose",
        Electrs::Ignored(
            "set log_filter instead (electrs' old scale: -v warn, -vv info, -vvv debug, -vvvv trace); electrs 0.12 refuses this key too",
        ),
    ),
    (
        "timestamp",
        Electrs::Ignored("Osprey's log lines always start with a timestamp"),
    ),
    (
        "auto_reindex",
        Electrs::Alias {
            osprey: "reindex_on_format_change",
            conversion: "",
        },
    ),
    ("db_dir", Electrs::Same),
    (
        "db_log_dir",
        Electrs::Ignored("RocksDB's log files stay in the index directory"),
    ),
    (
        "db_parallelism",
        Electrs::Ignored("Osprey sizes RocksDB's background threads itself"),
    ),
    ("daemon_dir", Electrs::Same),
    ("auth", Electrs::Same),
    ("cookie_file", Electrs::Same),
    ("network", Electrs::Same),
    ("electrum_rpc_addr", Electrs::Same),
    ("daemon_rpc_addr", Electrs::Same),
    ("monitoring_addr", Electrs::Same),
    (
        "wait_duration_secs",
        Electrs::Alias {
            osprey: "poll_interval_ms",
            conversion: "seconds × 1000",
        },
    ),
    (
        "jsonrpc_timeout_secs",
        Electrs::Ignored("Osprey waits up to 120 s for each call to the node"),
    ),
    (
        "ignore_mempool",
        Electrs::Ignored("Osprey always follows the node's mempool"),
    ),
    (
        "disable_electrum_rpc",
        Electrs::Ignored(
            "Osprey's Electrum port opens at startup and serves wallets once synced; `osprey index` indexes to the tip without serving, then exits",
        ),
    ),
    (
        "sync_once",
        Electrs::Honoured("`osprey serve` indexes to the node's tip, then exits (as `osprey index`)"),
    ),
    (
        "skip_block_download_wait",
        Electrs::Ignored(
            "Osprey never waits: it indexes during the node's initial block download and serves once that is done",
        ),
    ),
    (
        "version",
        Electrs::Ignored("run `osprey --version` to print the version"),
    ),
    (
        "index_lookup_limit",
        Electrs::Alias {
            osprey: "history_entries_max",
            conversion: "0 (electrs: no limit) is no limit",
        },
    ),
    (
        "reindex_last_blocks",
        Electrs::Ignored("--reindex rebuilds the whole index; reorgs are undone without it"),
    ),
    (
        "server_banner",
        Electrs::Alias {
            osprey: "banner",
            conversion: "",
        },
    ),
    (
        "log_filters",
        Electrs::Alias {
            osprey: "log_filter",
            conversion: "levels are the same; filters by module name only match Osprey's modules",
        },
    ),
    ("conf", Electrs::Same),
    (
        "conf_dir",
        Electrs::Honoured(
            "every file in the directory is read, in name order, where --conf-dir appears on the command line",
        ),
    ),
    (
        "skip_default_conf_files",
        Electrs::Honoured(
            "electrs' default files (/etc/electrs/config.toml, ~/.electrs/config.toml, ./electrs.toml) and ./osprey.toml are not read",
        ),
    ),
    // Earlier releases: from the v0.9.0, v0.10.0 and v0.11.1 specs.
    (
        "daemon_p2p_addr",
        Electrs::Ignored("Osprey reads blocks from the node's files, REST or RPC, never over P2P"),
    ),
    (
        "index_batch_size",
        Electrs::Ignored("Osprey sizes its batches of blocks itself"),
    ),
    (
        "signet_magic",
        Electrs::Ignored("Osprey knows each network's magic"),
    ),
    ("magic", Electrs::Ignored("Osprey knows each network's magic")),
    // Removed in electrs 0.9 (its doc/upgrading.md).
    (
        "cookie",
        Electrs::Alias {
            osprey: "auth",
            conversion: "electrs 0.8's USER:PASSWORD (RoninDojo still writes it)",
        },
    ),
    (
        "jsonrpc_import",
        Electrs::Ignored("block_source chooses how blocks are read"),
    ),
    (
        "bulk_index_threads",
        Electrs::Ignored("Osprey sizes its indexing threads itself"),
    ),
    (
        "tx_cache_size_mb",
        Electrs::Ignored("Osprey keeps no transaction cache to size"),
    ),
    (
        "blocktxids_cache_size_mb",
        Electrs::Ignored("Osprey keeps no block txid cache to size"),
    ),
    (
        "txid_limit",
        Electrs::Ignored("electrs 0.9 renamed it index_lookup_limit, which Osprey reads"),
    ),
];

/// What Osprey does instead of electrs setting `key`, or `None` if
/// Osprey honours it.
pub fn difference(key: &str) -> Option<String> {
    match SETTINGS.iter().find(|(name, _)| *name == key)?.1 {
        Electrs::Ignored(instead) => Some(format!("{key} is ignored: {instead}")),
        Electrs::Same | Electrs::Alias { .. } | Electrs::Honoured(_) => None,
    }
}

impl ConfigArgs {
    /// This layer with electrs' names of Osprey's settings folded into
    /// Osprey's, in Osprey's units. Folded one layer at a time, before the
    /// layers are combined, so that a flag of either name overrides the
    /// file's; within a layer, both names must agree.
    ///
    /// # Errors
    /// Both names given with different values.
    pub(super) fn electrs_names_folded(mut self) -> anyhow::Result<ConfigArgs> {
        // electrs' flag form `--no-auto-reindex` is `auto_reindex = false`.
        let auto_reindex = match (self.auto_reindex.take(), self.no_auto_reindex) {
            (Some(true), true) => bail!("auto_reindex is true, yet --no-auto-reindex is given"),
            (_, true) => Some(false),
            (value, false) => value,
        };
        self.no_auto_reindex = false;
        self.reindex_on_format_change = either(
            ("reindex_on_format_change", self.reindex_on_format_change),
            ("auto_reindex", auto_reindex),
        )?;
        self.banner = either(
            ("banner", self.banner.take()),
            ("server_banner", self.server_banner.take()),
        )?;
        self.auth = either(("auth", self.auth.take()), ("cookie", self.cookie.take()))?;
        self.log_filter = either(
            ("log_filter", self.log_filter.take()),
            ("log_filters", self.log_filters.take()),
        )?;
        // electrs: "0 - disable the limit". The key stays set, for the
        // startup line to say how Osprey counts it.
        let index_lookup_limit =
            self.index_lookup_limit
                .map(|limit| if limit == 0 { usize::MAX } else { limit });
        self.history_entries_max = either(
            ("history_entries_max", self.history_entries_max),
            ("index_lookup_limit", index_lookup_limit),
        )?;
        let wait_duration = self
            .wait_duration_secs
            .take()
            .map(|secs| secs.saturating_mul(1000));
        self.poll_interval_ms = either(
            ("poll_interval_ms", self.poll_interval_ms),
            ("wait_duration_secs", wait_duration),
        )?;
        Ok(self)
    }

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
            "jsonrpc_import" => self.jsonrpc_import,
            "bulk_index_threads" => self.bulk_index_threads.is_some(),
            "tx_cache_size_mb" => self.tx_cache_size_mb.is_some(),
            "blocktxids_cache_size_mb" => self.blocktxids_cache_size_mb.is_some(),
            "txid_limit" => self.txid_limit.is_some(),
            other => panic!("electrs setting {other} is not one Osprey ignores"),
        }
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

/// The start of the one startup line of differences.
const DIFFERENCES: &str = "electrs settings Osprey does not honour as electrs does: ";

/// Adds `difference` to the one startup line of differences in
/// `warnings`, starting that line if there is none.
pub(super) fn add_difference(warnings: &mut Vec<String>, difference: &str) {
    match warnings.iter_mut().find(|w| w.starts_with(DIFFERENCES)) {
        Some(line) => {
            line.push_str(" | ");
            line.push_str(difference);
        }
        None => warnings.push(format!("{DIFFERENCES}{difference}")),
    }
}

/// Where electrs serves its metrics when `monitoring_addr` is unset
/// (romanz/electrs `src/config.rs`, `default_monitoring_port`).
pub(super) fn default_monitoring_addr(network: osprey_core::Network) -> String {
    let port = match network {
        osprey_core::Network::Bitcoin => 4224,
        osprey_core::Network::Testnet => 14224,
        osprey_core::Network::Testnet4 => 44224,
        osprey_core::Network::Regtest => 24224,
        osprey_core::Network::Signet => 34224,
    };
    format!("127.0.0.1:{port}")
}

/// The one startup line naming every electrs setting `settings` give
/// that Osprey does not honour as electrs does, in the order of
/// [`SETTINGS`]; `None` when there is none.
pub(super) fn differences_warning(settings: &ConfigArgs) -> Option<String> {
    let differences: Vec<String> = SETTINGS
        .iter()
        .filter_map(|(key, what)| match (*key, what) {
            ("index_lookup_limit", _) => settings
                .index_lookup_limit
                .filter(|limit| *limit > 0)
                .map(|limit| format!("index_lookup_limit {limit} is history_entries_max, which counts every history entry of a script (each output received and each spent), where electrs 0.9-0.11 counted the transactions funding it and electrs 0.12 does not limit")),
            (key, Electrs::Ignored(_)) if settings.sets_ignored(key) => difference(key),
            _ => None,
        })
        .collect();
    if differences.is_empty() {
        return None;
    }
    Some(format!("{DIFFERENCES}{}", differences.join(" | ")))
}

/// A warning if `db_path`, the network's index directory, holds electrs'
/// index. electrs names that directory as Osprey does (db_dir/bitcoin,
/// db_dir/testnet4, ...), RocksDB's files directly in it; Osprey's own
/// RocksDB is in its rocksdb/ sub-directory.
pub(super) fn index_warning(db_path: &Path) -> Option<String> {
    db_path.join("CURRENT").is_file().then(|| {
        format!(
            "db_dir: {} holds an electrs index, which Osprey does not read: Osprey builds its own beside it (rocksdb/ and *.dat); delete electrs' files there once electrs is gone (Osprey's --reindex and format rebuilds delete only its own)",
            db_path.display()
        )
    })
}
