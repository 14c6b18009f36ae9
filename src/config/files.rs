//! The config files: where they are, and how one is read into a layer of
//! settings.

use super::ConfigArgs;
use anyhow::Context;
use std::path::{Path, PathBuf};

/// What a key the file does not know does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum UnknownKeys {
    /// Startup stops with the key named: a file written for Osprey, where
    /// an unknown key is a typo whose setting would silently not count.
    Refused,
    /// One warning per key, and the rest of the file counts: a file
    /// written for electrs, which ignores keys it does not know, so its
    /// files may hold keys of other electrs versions (RaspiBlitz writes
    /// `index-batch-size`, which no electrs knows) that must not stop a
    /// node package's start.
    Warned,
}

/// Settings of `ConfigArgs` that are flags only: a file does not know
/// them (`#[serde(skip)]`).
const FLAG_ONLY: &[&str] = &[
    "conf",
    "conf_dir",
    "skip_default_conf_files",
    "reindex",
    "no_auto_reindex",
];

/// The files electrs reads when it starts, lowest precedence first:
/// configure_me loads its list `./electrs.toml`,
/// `~/.electrs/config.toml`, `/etc/electrs/config.toml` each *under* the
/// ones before (romanz/electrs `src/config.rs` `default_config_files`,
/// Kixunil/configure_me `including_optional_config_files`).
pub(super) fn electrs_default_files() -> Vec<PathBuf> {
    let mut files = vec![PathBuf::from("/etc/electrs/config.toml")];
    files.extend(home_dir().map(|home| home.join(".electrs").join("config.toml")));
    files.push(PathBuf::from("electrs.toml"));
    files
}

/// Every file of `dir`, in name order (electrs takes the directory's
/// order, which is the file system's; name order is the one a person can
/// predict).
pub(super) fn files_in(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    let mut files = std::fs::read_dir(dir)
        .and_then(|entries| {
            entries
                .map(|entry| entry.map(|e| e.path()))
                .collect::<std::io::Result<Vec<PathBuf>>>()
        })
        .with_context(|| format!("reading conf_dir {}", dir.display()))?;
    files.retain(|path| path.is_file());
    files.sort();
    Ok(files)
}

/// Reads one config file into a layer of settings. Unknown keys are
/// refused or, as `unknown` says, left out with a warning each pushed on
/// `warnings`.
///
/// # Errors
/// The file cannot be read, is not TOML, has a value of the wrong type,
/// or (refused) an unknown key; the message names the file.
pub(super) fn read_file(
    path: &Path,
    unknown: UnknownKeys,
    warnings: &mut Vec<String>,
) -> anyhow::Result<ConfigArgs> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading config file {}", path.display()))?;
    let mut table: toml::Table =
        toml::from_str(&text).with_context(|| format!("config file {}", path.display()))?;
    if unknown == UnknownKeys::Warned {
        // The file's one name, so that a file read twice (by default and
        // by --conf) warns once.
        let name = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
        let known = file_keys();
        table.retain(|key, _| {
            let is_known = known.iter().any(|k| k == key);
            if !is_known {
                warnings.push(format!(
                    "config file {}: unknown key {key} is ignored (electrs ignores it too)",
                    name.display()
                ));
            }
            is_known
        });
    }
    toml::Value::Table(table)
        .try_into()
        .with_context(|| format!("config file {}", path.display()))
}

/// The keys a config file knows: every setting's name but the flag-only
/// ones.
pub(super) fn file_keys() -> Vec<String> {
    use clap::Args as _;
    ConfigArgs::augment_args(clap::Command::new("osprey"))
        .get_arguments()
        .map(|arg| arg.get_id().as_str().to_string())
        .filter(|id| !FLAG_ONLY.contains(&id.as_str()))
        .collect()
}

/// The user's home directory: `HOME`, or when it is unset (a service
/// started without one) the password database's entry for this user, as
/// electrs finds it (`dirs_next::home_dir`). std does exactly that on
/// Unix (getpwuid_r), without unsafe code here.
pub(super) fn home_dir() -> Option<PathBuf> {
    std::env::home_dir().filter(|home| !home.as_os_str().is_empty())
}
