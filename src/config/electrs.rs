//! What Osprey does with each setting of electrs, so that electrs' config
//! file, flags and `ELECTRS_*` variables (renamed `OSPREY_*`) start Osprey.
//!
//! Sources (romanz/electrs at 1222d361, the tree released as 0.12.0, see
//! `tests/data/electrs/README.md`): `internal/config_specification.toml`
//! for the keys, `src/config.rs` for their meanings; keys that earlier
//! releases had come from the v0.9.0, v0.10.0 and v0.11.1 specs and from
//! `doc/upgrading.md` (options electrs 0.9 removed). Packages that pass
//! them: getumbrel/umbrel-apps `electrs/docker-compose.yml` (`ELECTRS_*`
//! variables), Start9Labs/electrs-startos `startos/fileModels/electrs.toml.ts`
//! (a TOML file) and raspiblitz/raspiblitz
//! `home.admin/config.scripts/bonus.electrs.sh` (a TOML file and a flag).

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
            "Osprey serves Electrum clients once synced; `osprey index` indexes to the tip without serving, then exits",
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
        Electrs::Honoured("every file in the directory is read, in name order, under --conf"),
    ),
    (
        "skip_default_conf_files",
        Electrs::Honoured(
            "./osprey.toml is not read; Osprey never reads electrs' default files (/etc/electrs/config.toml, ~/.electrs/config.toml, ./electrs.toml)",
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
        Electrs::Ignored("give USER:PASSWORD as auth, or the node's cookie as cookie_file"),
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

/// The startup warning for electrs setting `key`, or `None` if Osprey
/// honours it.
pub fn warning(key: &str) -> Option<String> {
    match SETTINGS.iter().find(|(name, _)| *name == key)?.1 {
        Electrs::Ignored(instead) => {
            Some(format!("{key} (an electrs setting) is ignored: {instead}"))
        }
        Electrs::Same | Electrs::Alias { .. } | Electrs::Honoured(_) => None,
    }
}
