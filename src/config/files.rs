//! The config files: which are read, in what order, and how their keys
//! combine into one layer of settings.

use super::ConfigArgs;
use anyhow::Context;
use std::path::{Path, PathBuf};

impl ConfigArgs {
    /// The config files to read, lowest precedence first: ./osprey.toml
    /// unless --conf or --skip-default-conf-files is given, every file of
    /// --conf-dir in name order, then --conf.
    pub(super) fn config_files(&self) -> anyhow::Result<Vec<PathBuf>> {
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
}

/// Reads `paths` in order, a later file's keys over an earlier's; each
/// file is checked on its own so that an error names it.
pub(super) fn read_files(paths: &[PathBuf]) -> anyhow::Result<ConfigArgs> {
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

pub(super) fn home_dir() -> Option<PathBuf> {
    std::env::var_os("HOME").map(PathBuf::from)
}
