use super::*;
use osprey_core::Network;
use std::path::{Path, PathBuf};

/// Tests resolve settings without a command line to place them on.
trait Resolve {
    fn resolve(&self) -> anyhow::Result<Config>;
}

impl Resolve for ConfigArgs {
    /// These settings as if given on the command line of `osprey serve`
    /// after their `--conf-dir` and `--conf`, without variables.
    fn resolve(&self) -> anyhow::Result<Config> {
        let unknown = files::UnknownKeys::Refused;
        let mut sources: Vec<Source> = Vec::new();
        sources.extend(self.conf_dir.clone().map(|dir| Source::Dir(dir, unknown)));
        sources.extend(self.conf.clone().map(|file| Source::File(file, unknown)));
        sources.push(Source::Settings(Box::new(self.clone())));
        resolve_sources(sources, self.skip_default_conf_files, self.conf.is_some())
    }
}

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
fn proxy_sources_and_the_ipv6_prefix_are_checked_at_startup() {
    let c = args(None).resolve().unwrap();
    assert!(c.proxy_protocol_from.is_empty(), "no proxy by default");
    assert_eq!(c.ipv6_prefix_bits, 64);
    let mut a = args(None);
    a.proxy_protocol_from = Some("127.0.0.1/32, fd00::/8".into());
    a.ipv6_prefix_bits = Some(48);
    let c = a.resolve().unwrap();
    assert_eq!(
        c.proxy_protocol_from
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>(),
        ["127.0.0.1/32", "fd00::/8"]
    );
    assert_eq!(c.ipv6_prefix_bits, 48);
    let mut a = args(None);
    a.proxy_protocol_from = Some("10.0.0.1/8".into());
    let err = format!("{:#}", a.resolve().unwrap_err());
    assert!(err.contains("proxy_protocol_from"), "{err}");
    for bits in [0, 31, 129] {
        let mut a = args(None);
        a.ipv6_prefix_bits = Some(bits);
        let err = format!("{:#}", a.resolve().unwrap_err());
        assert!(
            err.contains("ipv6_prefix_bits must be 32 to 128"),
            "{bits}: {err}"
        );
    }
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
        "sp_labels_max" => config.sp_labels_max.to_string(),
        "sp_scan_priority" => config.sp_scan_priority.name().to_string(),
        "sp_subscriptions_per_session_max" => config.sp_subscriptions_per_session_max.to_string(),
        "sessions_max" => config.sessions_max.to_string(),
        "reorg_depth_max" => config.reorg_depth_max.to_string(),
        "poll_interval_ms" => config.poll_interval_ms.to_string(),
        "disk_full_retry_max_secs" => config.disk_full_retry_max_secs.to_string(),
        "banner" => config.banner.clone(),
        "client_memory_bytes_max" => config.client_memory_bytes_max.to_string(),
        "sessions_per_ip_max" => config.sessions_per_ip_max.to_string(),
        "trusted_subnets" => config
            .trusted_subnets
            .iter()
            .map(ToString::to_string)
            .collect::<Vec<_>>()
            .join(","),
        "ipv6_prefix_bits" => config.ipv6_prefix_bits.to_string(),
        "db_cache_mb" => (config.db_cache_bytes >> 20).to_string(),
        "lsm_scale" => config.lsm_scale.to_string(),
        "reindex_on_format_change" => config.reindex_on_format_change.to_string(),
        "silent_payments" => config.silent_payments.to_string(),
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
        | "proxy_protocol_from"
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
    let readme = include_str!("../../README.md");
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
    assert_eq!(defaults.sp_labels_max, limits.sp_labels_max);
    assert_eq!(
        defaults.sp_subscriptions_per_session_max,
        limits.sp_subscriptions_per_session_max
    );
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
    let example = include_str!("../../contrib/osprey.toml.example");
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
const ELECTRS_EXAMPLE: &str = include_str!("../../tests/data/electrs/config_example.toml");
/// electrs' configure_me spec, committed verbatim from romanz/electrs
/// `internal/config_specification.toml`.
const ELECTRS_SPEC: &str = include_str!("../../tests/data/electrs/config_specification.toml");

/// The config of an electrs file given with `--conf` (and no default
/// file).
fn from_toml(text: &str) -> anyhow::Result<Config> {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("electrs.toml");
    std::fs::write(&path, text).unwrap();
    resolve_sources(
        vec![Source::File(path, files::UnknownKeys::Warned)],
        true,
        true,
    )
}

/// The one startup line of differences, if any.
fn differences(config: &Config) -> Option<&String> {
    let mut lines = config
        .warnings
        .iter()
        .filter(|w| w.starts_with("electrs settings Osprey does not honour"));
    let line = lines.next();
    assert!(lines.next().is_none(), "one line: {:?}", config.warnings);
    line
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
    assert_eq!(c.warnings.len(), 1, "{:?}", c.warnings);
    let line = differences(&c).unwrap();
    assert!(
        line.contains("daemon_p2p_addr is ignored") && line.contains("index_batch_size is ignored"),
        "{line}"
    );
    assert!(
        !line.contains("index_lookup_limit"),
        "0 means no limit in both: {line}"
    );
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
        match (*key, what) {
            (_, electrs::Electrs::Ignored(_)) => {
                assert_eq!(config.warnings.len(), 1, "{text}: {:?}", config.warnings);
                let line = differences(&config).unwrap();
                assert!(line.contains(&format!(": {key} is ignored: ")), "{line}");
            }
            // Honoured, but counted otherwise: named on the line too.
            ("index_lookup_limit", _) => {
                let line = differences(&config).unwrap();
                assert!(
                    line.contains("index_lookup_limit 3 is history_entries_max"),
                    "{line}"
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
        differences(&config)
            .unwrap()
            .contains(": verbose is ignored"),
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
    let crate::Command::Serve { config: args, .. } = cli.command else {
        panic!("not serve");
    };
    assert!(args.version && args.sync_once && args.no_auto_reindex);
    let c = args.over(ConfigArgs::default()).unwrap();
    assert!(c.sync_once);
    assert_eq!(c.history_entries_max, usize::MAX);
    let line = differences(&c).unwrap();
    let verbose = line.find(": verbose is ignored").unwrap();
    let version = line.find(" | version is ignored").unwrap();
    assert!(
        verbose < version,
        "in the order of electrs::SETTINGS: {line}"
    );
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
        err.contains("banner (\"a\") and electrs' server_banner") && err.contains("electrs.toml"),
        "the file named: {err}"
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

/// electrs ignores keys it does not know: in its files Osprey warns once
/// per file and key; in Osprey's own files an unknown key is an error.
#[test]
fn unknown_keys_warn_in_electrs_files_and_fail_in_ospreys() {
    // RaspiBlitz writes `index-batch-size`, which no electrs knows.
    let c = from_toml("index-batch-size = 10\nserver_baner = \"hi\"\nbanner = \"b\"\n").unwrap();
    assert_eq!(c.banner, "b", "the rest of the file counts");
    assert_eq!(c.warnings.len(), 2, "{:?}", c.warnings);
    for (warning, key) in c.warnings.iter().zip(["index-batch-size", "server_baner"]) {
        assert!(
            warning.contains("electrs.toml: unknown key ") && warning.contains(key),
            "{warning}"
        );
    }
    // A flag-only setting is no key of a file either.
    let c = from_toml("conf = \"/x.toml\"\n").unwrap();
    assert!(
        c.warnings[0].contains("unknown key conf "),
        "{:?}",
        c.warnings
    );
    // A known key with a value of the wrong type still stops startup.
    let err = format!("{:#}", from_toml("sessions_max = \"many\"\n").unwrap_err());
    assert!(err.contains("electrs.toml"), "{err}");
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("osprey.toml");
    std::fs::write(&path, "daemon_p2p_adr = \"127.0.0.1:8333\"\n").unwrap();
    let err = format!("{:#}", args(Some(&path)).resolve().unwrap_err());
    assert!(
        err.contains("daemon_p2p_adr") && err.contains("osprey.toml"),
        "{err}"
    );
}

/// The keys a file knows are the fields serde reads.
#[test]
fn file_keys_are_the_fields_a_file_deserializes() {
    use clap::Args as _;
    let known = files::file_keys();
    for arg in ConfigArgs::augment_args(clap::Command::new("osprey")).get_arguments() {
        let key = arg.get_id().as_str();
        let parsed = toml::from_str::<ConfigArgs>(&format!("{key} = 1"));
        let unknown = parsed
            .err()
            .is_some_and(|e| e.to_string().contains("unknown field"));
        assert_eq!(known.iter().any(|k| k == key), !unknown, "{key}");
    }
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

/// Runs test `name` again in a child process with only the variables
/// `env`, in `cwd`: both are process-wide, so a test that sets them must
/// have a process of its own. True in the child (test on), false in the
/// parent once the child passed.
fn in_child(name: &str, env: &[(&str, &str)], cwd: &Path) -> bool {
    const CHILD: &str = "CONFIG_TEST_CHILD";
    if std::env::var_os(CHILD).is_some() {
        return true;
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &format!("config::tests::{name}"), "--nocapture"])
        .env_clear()
        .envs(env.iter().copied())
        .env(CHILD, "1")
        .current_dir(cwd)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout) + String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{text}");
    assert!(text.contains("1 passed"), "the child ran {name}: {text}");
    false
}

/// `line` (after the program's name) parsed as `osprey serve`'s settings
/// with this process's variables, and resolved as a launch as electrs'.
fn resolve_line(line: &[&str]) -> anyhow::Result<Config> {
    use clap::{Args as _, FromArgMatches as _};
    let matches = ConfigArgs::augment_args(clap::Command::new("osprey"))
        .try_get_matches_from([&["osprey"][..], line].concat())?;
    let args = ConfigArgs::from_arg_matches(&matches)?;
    resolve(&args, &matches, Launch::Electrs)
}

/// The environment Umbrel's electrs app passes (getumbrel/umbrel-apps
/// `electrs/docker-compose.yml` at 3f5655bd, electrs 0.9.10), its `${...}`
/// filled in; no cookie file is named, so the cookie is found under
/// `$HOME/.bitcoin`, where Umbrel mounts the node's directory.
const UMBREL_ENV: &[(&str, &str)] = &[
    ("ELECTRS_LOG_FILTERS", "INFO"),
    ("ELECTRS_NETWORK", "bitcoin"),
    ("ELECTRS_DAEMON_RPC_ADDR", "10.21.21.8:8332"),
    ("ELECTRS_DAEMON_P2P_ADDR", "10.21.21.8:8333"),
    ("ELECTRS_ELECTRUM_RPC_ADDR", "0.0.0.0:50001"),
    ("ELECTRS_SERVER_BANNER", "Umbrel Electrs (v0.9.10)"),
    ("ELECTRS_DB_DIR", "/data/db"),
    ("HOME", "/data"),
];

#[test]
fn a_node_packages_environment_starts_osprey() {
    let name = "a_node_packages_environment_starts_osprey";
    if !in_child(name, UMBREL_ENV, Path::new("/")) {
        return;
    }
    // RaspiBlitz's one flag (raspiblitz/raspiblitz
    // home.admin/config.scripts/bonus.electrs.sh, its systemd unit) over
    // Umbrel's variable.
    let c = resolve_line(&["--electrum-rpc-addr=0.0.0.0:50002"]).unwrap();
    assert_eq!(c.network, Network::Bitcoin);
    assert_eq!(c.db_path, PathBuf::from("/data/db/bitcoin"));
    assert_eq!(
        c.electrum_rpc_addr,
        "0.0.0.0:50002".parse().unwrap(),
        "the flag over the variable"
    );
    assert_eq!(
        (c.banner.as_str(), c.log_filter.as_str()),
        ("Umbrel Electrs (v0.9.10)", "INFO")
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
    assert!(c.warnings[0].contains(": daemon_p2p_addr is ignored"));
    assert!(
        c.warnings[0]
            .contains(" | monitoring_addr is unset: electrs serves its metrics on 127.0.0.1:4224"),
        "{:?}",
        c.warnings
    );
    let c = resolve_line(&["--monitoring-addr=127.0.0.1:4224"]).unwrap();
    assert!(
        !c.warnings[0].contains("monitoring_addr"),
        "{:?}",
        c.warnings
    );
}

/// electrs' order, lowest first: its default files (the working
/// directory's over the home directory's), `./osprey.toml` over them,
/// `ELECTRS_*` then `OSPREY_*` variables, then the command line from left
/// to right with `--conf` where it stands.
#[test]
fn settings_layer_in_electrs_order() {
    let name = "settings_layer_in_electrs_order";
    let dir = tempfile::tempdir().unwrap();
    if std::env::var_os("CONFIG_TEST_CHILD").is_none() {
        let home = dir.path().join("home");
        std::fs::create_dir_all(home.join(".electrs")).unwrap();
        std::fs::write(
            home.join(".electrs/config.toml"),
            "banner = \"home\"\nsessions_max = 1\nbatch_requests_max = 1\nnetwork = \"regtest\"\nauth = \"u:p\"\n",
        )
        .unwrap();
        std::fs::write(
            dir.path().join("electrs.toml"),
            "banner = \"cwd\"\nsessions_max = 2\nline_bytes_max = 2\nbatch_reqests_max = 2\ndb_dir = \"/cwd-db\"\n",
        )
        .unwrap();
        std::fs::write(dir.path().join("osprey.toml"), "line_bytes_max = 3\n").unwrap();
        std::fs::write(
            dir.path().join("conf.toml"),
            "sessions_max = 5\nelectrum_rpc_addr = \"127.0.0.1:1111\"\nreply_bytes_max = 2000000\n",
        )
        .unwrap();
        let home = home.to_str().unwrap();
        let env = [
            ("HOME", home),
            ("OSPREY_SESSIONS_MAX", "3"),
            ("ELECTRS_DB_DIR", "/var-db"),
            ("ELECTRS_LOG_FILTERS", "warn"),
            ("OSPREY_LOG_FILTER", "debug"),
            ("ELECTRS_SYNC_ONCE", "1"),
            ("ELECTRS_AUTO_REINDEX", "0"),
            ("OSPREY_SILENT_PAYMENTS", "1"),
            ("ELECTRS_VERSION", "0"),
        ];
        in_child(name, &env, dir.path());
        return;
    }
    let c = resolve_line(&[]).unwrap();
    assert_eq!(
        c.banner, "cwd",
        "./electrs.toml over ~/.electrs/config.toml"
    );
    assert_eq!(
        c.batch_requests_max, 1,
        "the home file counts where cwd's is silent"
    );
    assert_eq!(c.line_bytes_max, 3, "./osprey.toml over electrs' files");
    assert_eq!(c.sessions_max, 3, "variables over files");
    assert_eq!(
        c.db_path,
        Path::new("/var-db/regtest"),
        "ELECTRS_* over files"
    );
    assert_eq!(c.log_filter, "debug", "OSPREY_* over ELECTRS_*");
    assert!(c.sync_once && c.silent_payments, "1 is true");
    assert!(!c.reindex_on_format_change, "0 is false");
    let cwd = std::env::current_dir().unwrap().canonicalize().unwrap();
    let unknown = format!(
        "config file {}: unknown key batch_reqests_max is ignored (electrs ignores it too)",
        cwd.join("electrs.toml").display()
    );
    // ELECTRS_VERSION=0 asks for nothing; regtest's metrics port is
    // electrs' only difference here.
    let metrics = "electrs settings Osprey does not honour as electrs does: monitoring_addr is unset: electrs serves its metrics on 127.0.0.1:24224 then, Osprey serves none (set monitoring_addr to serve them)";
    assert_eq!(c.warnings, [unknown.as_str(), metrics]);
    // The default file again with --conf: read twice, warned once.
    let c = resolve_line(&["--conf", "./electrs.toml"]).unwrap();
    assert_eq!(c.warnings, [unknown.as_str(), metrics]);
    // --conf where it stands: over the flags before it and the
    // variables, under the flags after it; ./osprey.toml is not read.
    let c = resolve_line(&[
        "--electrum-rpc-addr",
        "127.0.0.1:2222",
        "--conf",
        "conf.toml",
        "--reply-bytes-max",
        "3000000",
    ])
    .unwrap();
    assert_eq!(
        c.electrum_rpc_addr.port(),
        1111,
        "the file over the flag before it"
    );
    assert_eq!(
        c.reply_bytes_max, 3_000_000,
        "the flag after it over the file"
    );
    assert_eq!(c.sessions_max, 5, "the file over the variables");
    assert_eq!(c.line_bytes_max, 2, "./osprey.toml is not read with --conf");
    let c = resolve_line(&["--conf=conf.toml", "--electrum-rpc-addr=127.0.0.1:2222"]).unwrap();
    assert_eq!(c.electrum_rpc_addr.port(), 2222, "the flag after it");
    // No default file at all.
    let c = resolve_line(&[
        "--skip-default-conf-files",
        "--auth",
        "u:p",
        "--monitoring-addr=127.0.0.1:4224",
    ])
    .unwrap();
    assert_eq!(
        (c.banner.as_str(), c.batch_requests_max, c.network),
        ("Welcome to Osprey", 200, Network::Bitcoin)
    );
    assert_eq!(c.warnings, Vec::<String>::new());
}

/// A variable's value that does not parse stops startup, naming whose
/// variables and the setting; electrs' switches take 1, 0, true, false.
#[test]
fn a_bad_variable_is_named() {
    let name = "a_bad_variable_is_named";
    if !in_child(name, &[("ELECTRS_AUTO_REINDEX", "maybe")], Path::new("/")) {
        return;
    }
    let err = format!(
        "{:#}",
        resolve_line(&["--skip-default-conf-files"]).unwrap_err()
    );
    assert!(
        err.contains("ELECTRS_* variables") && err.contains("auto-reindex"),
        "{err}"
    );
}

/// The user in the password database (uid from /proc/self), by reading
/// /etc/passwd: the test's own way to the answer.
fn passwd_home() -> Option<PathBuf> {
    use std::os::unix::fs::MetadataExt as _;
    let uid = std::fs::metadata("/proc/self").unwrap().uid().to_string();
    let passwd = std::fs::read_to_string("/etc/passwd").ok()?;
    passwd.lines().find_map(|line| {
        let fields: Vec<&str> = line.split(':').collect();
        (fields.get(2) == Some(&uid.as_str())).then(|| PathBuf::from(fields[5]))
    })
}

/// A service started without HOME still finds `~/.bitcoin` and
/// `~/.electrs`, in the password database's home, as electrs does.
#[test]
fn without_home_the_password_databases_home_counts() {
    let name = "without_home_the_password_databases_home_counts";
    if !in_child(name, &[], Path::new("/")) {
        return;
    }
    assert!(std::env::var_os("HOME").is_none());
    let home = passwd_home().expect("this user is in /etc/passwd");
    assert_eq!(files::home_dir(), Some(home.clone()));
    let mut a = args(None);
    a.network = Some("regtest".into());
    a.skip_default_conf_files = true;
    match a.resolve().unwrap().chain {
        ChainConfig::Node {
            auth: osprey_chain::rpc::Auth::CookieFile(cookie),
            ..
        } => assert_eq!(cookie, home.join(".bitcoin/regtest/.cookie")),
        other => panic!("{other:?}"),
    }
    assert!(files::electrs_default_files().contains(&home.join(".electrs/config.toml")));
}

#[test]
fn readme_lists_every_electrs_setting() {
    let readme = include_str!("../../README.md");
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

/// `osprey serve FLAGS`'s settings over those of a config file holding
/// `file`, resolved.
fn serve_flags_over_file(flags: &[&str], file: &str) -> anyhow::Result<Config> {
    use clap::Parser as _;
    let cli = crate::Cli::try_parse_from([&["osprey", "serve"], flags].concat())
        .unwrap_or_else(|e| panic!("{e}"));
    let crate::Command::Serve { config: args, .. } = cli.command else {
        panic!("not serve");
    };
    let file: ConfigArgs = toml::from_str(file).unwrap();
    args.over(file)
}

/// `--silent-payments` alone turns the records on; a value, or the file,
/// can say either way, and the flag wins over the file.
#[test]
fn silent_payments_is_a_switch_that_takes_a_value() {
    let resolve =
        |flags: &[&str], file: &str| serve_flags_over_file(flags, file).unwrap().silent_payments;
    assert!(!resolve(&[], ""));
    assert!(resolve(&["--silent-payments"], ""));
    assert!(resolve(&["--silent-payments", "true"], ""));
    assert!(resolve(&[], "silent_payments = true"));
    assert!(!resolve(
        &["--silent-payments", "false"],
        "silent_payments = true"
    ));
    assert!(!resolve(&["--silent-payments=false"], ""));
}

/// `sp_scan_priority` takes its three names from the flag or the file
/// (the flag wins), and a typo stops startup naming the key and the
/// choices.
#[test]
fn sp_scan_priority_takes_one_of_three_names() {
    use osprey_server::ScanPriority;
    let resolve =
        |flags: &[&str], file: &str| serve_flags_over_file(flags, file).map(|c| c.sp_scan_priority);
    assert_eq!(resolve(&[], "").unwrap(), ScanPriority::Idle);
    assert_eq!(
        resolve(&[], "sp_scan_priority = \"low\"").unwrap(),
        ScanPriority::Low
    );
    assert_eq!(
        resolve(
            &["--sp-scan-priority", "normal"],
            "sp_scan_priority = \"low\""
        )
        .unwrap(),
        ScanPriority::Normal
    );
    let err = format!(
        "{:#}",
        resolve(&["--sp-scan-priority", "nice"], "").unwrap_err()
    );
    assert!(
        err.contains("sp_scan_priority \"nice\"") && err.contains("idle, low, normal"),
        "{err}"
    );
}
