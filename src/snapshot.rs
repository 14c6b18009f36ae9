//! `osprey snapshot export` and `osprey snapshot import`: the index as one
//! file, to build it on a big machine and serve it from a small one. The
//! format and its checks are `osprey_store::snapshot`'s; this module picks
//! the paths and checks the snapshot's tip against the node.

use crate::config::{ChainConfig, Config, ConfigArgs};
use anyhow::{bail, Context};
use clap::Subcommand;
use osprey_chain::{BlkFiles, ChainSource, Daemon};
use osprey_core::Height;
use osprey_store::snapshot::{Manifest, SnapshotReader};
use osprey_store::{Store, StoreConfig};
use std::fs::File;
use std::io::{BufReader, BufWriter};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Subcommand)]
pub enum SnapshotCommand {
    /// Write the index (stop `osprey serve` first) to one file
    Export {
        #[command(flatten)]
        config: ConfigArgs,
        /// The snapshot file to write, or a directory to write
        /// `osprey-<network>-<height>.tar` in
        #[arg(long)]
        out: PathBuf,
    },
    /// Check a snapshot against this build and the node, then make it the
    /// index of --db-dir (which must hold none yet)
    Import {
        #[command(flatten)]
        config: ConfigArgs,
        /// The snapshot file
        #[arg(long)]
        from: PathBuf,
    },
}

impl SnapshotCommand {
    pub fn config(&self) -> &ConfigArgs {
        match self {
            SnapshotCommand::Export { config, .. } | SnapshotCommand::Import { config, .. } => {
                config
            }
        }
    }

    /// Runs the command with the resolved `config`.
    pub fn run(self, config: Config) -> anyhow::Result<()> {
        match self {
            SnapshotCommand::Export { out, .. } => export(&config, &out),
            SnapshotCommand::Import { from, .. } => import(&config, &from),
        }
    }
}

/// The directory the network's index lives in (`--db-dir`).
fn db_dir(config: &Config) -> &Path {
    config.db_path.parent().unwrap_or(Path::new("."))
}

fn export(config: &Config, out: &Path) -> anyhow::Result<()> {
    let db_path = &config.db_path;
    if !db_path.join("rocksdb").exists() {
        bail!("no index at {}: nothing to export", db_path.display());
    }
    // RocksDB's lock refuses a second opener: a running server's index
    // cannot be exported, as its flat files would move under the copy.
    let store_config = StoreConfig {
        silent_payments: config.silent_payments,
        ..StoreConfig::default()
    };
    let store = Store::open(db_path, config.network.name(), store_config).with_context(|| {
        format!(
            "opening index at {} (a snapshot is taken from a stopped index: stop osprey first)",
            db_path.display()
        )
    })?;
    let (height, _) = store
        .tip()
        .context("the index is empty: nothing to export")?;
    let target = if out.is_dir() {
        out.join(format!("osprey-{}-{}.tar", config.network.name(), height.0))
    } else {
        out.to_path_buf()
    };
    if target.exists() {
        bail!(
            "{} exists: remove it or give another --out",
            target.display()
        );
    }
    // Written beside the target and renamed when complete, so that a cut
    // export never looks like a snapshot.
    let partial = target.with_extension("partial");
    let file = File::create(&partial).with_context(|| format!("creating {}", partial.display()))?;
    // The checkpoint hard-links RocksDB's files: it must be on the index's
    // file system.
    let scratch = tempfile::Builder::new()
        .prefix(".snapshot-export-")
        .tempdir_in(db_dir(config))
        .context("creating the checkpoint directory")?;
    tracing::info!(index = %db_path.display(), out = %target.display(), "exporting the index");
    let exported = store
        .export_snapshot(&scratch.path().join("checkpoint"), BufWriter::new(file))
        .and_then(|manifest| {
            File::open(&partial)
                .and_then(|f| f.sync_all())
                .map_err(|source| osprey_store::Error::File {
                    path: partial.clone(),
                    source,
                })?;
            Ok(manifest)
        });
    let manifest = match exported {
        Ok(manifest) => manifest,
        Err(e) => {
            let _ = std::fs::remove_file(&partial);
            return Err(e).context("exporting the index");
        }
    };
    std::fs::rename(&partial, &target)
        .with_context(|| format!("renaming {} to {}", partial.display(), target.display()))?;
    tracing::info!(
        file = %target.display(),
        height = manifest.tip_height,
        hash = %manifest.tip_hash,
        files = manifest.files.len(),
        bytes = manifest.files.iter().map(|f| f.bytes).sum::<u64>(),
        "snapshot written"
    );
    Ok(())
}

fn import(config: &Config, from: &Path) -> anyhow::Result<()> {
    let db_path = &config.db_path;
    let occupied = std::fs::read_dir(db_path).is_ok_and(|mut dir| dir.next().is_some());
    if occupied {
        bail!(
            "{} already holds an index: move it away (or import into another --db-dir)",
            db_path.display()
        );
    }
    let file = File::open(from).with_context(|| format!("opening {}", from.display()))?;
    let reader = SnapshotReader::open(
        BufReader::new(file),
        config.network.name(),
        config.silent_payments,
    )
    .with_context(|| format!("reading {}", from.display()))?;
    check_tip_in_best_chain(config, reader.manifest())?;
    let db_dir = db_dir(config);
    std::fs::create_dir_all(db_dir).with_context(|| format!("creating {}", db_dir.display()))?;
    // Unpacked beside its place and renamed there once checked: a failed
    // import leaves nothing in --db-dir.
    let staging = tempfile::Builder::new()
        .prefix(&format!(".{}-import-", config.network.name()))
        .tempdir_in(db_dir)
        .with_context(|| format!("creating a directory in {}", db_dir.display()))?;
    let unpacked = staging.path().join("index");
    tracing::info!(from = %from.display(), height = reader.manifest().tip_height, "importing the snapshot");
    let manifest = reader
        .unpack_waiting_for_room(&unpacked, &mut room_waiter(config))
        .with_context(|| format!("importing {}", from.display()))?;
    if db_path.exists() {
        // Empty (checked above): rename does not replace a directory.
        std::fs::remove_dir(db_path)
            .with_context(|| format!("removing the empty {}", db_path.display()))?;
    }
    std::fs::rename(&unpacked, db_path)
        .with_context(|| format!("moving the index to {}", db_path.display()))?;
    tracing::info!(
        index = %db_path.display(),
        height = manifest.tip_height,
        hash = %manifest.tip_hash,
        "snapshot imported; `osprey serve` resumes from its tip"
    );
    Ok(())
}

/// What an import does when the disk fills: says so once (then at most
/// once a minute), waits at doubling intervals from 1 s up to
/// `disk_full_retry_max_secs`, and tries the write again: it resumes by
/// itself once space is freed.
fn room_waiter(config: &Config) -> impl FnMut(&osprey_store::Error) -> bool {
    let retry_max = Duration::from_secs(config.disk_full_retry_max_secs);
    let mut delay = Duration::ZERO;
    let mut reminded: Option<Instant> = None;
    // The import unpacks beside the index's place: the line names that.
    let path = config.db_path.clone();
    move |full| {
        let osprey_store::Error::NoSpace { needed, free, .. } = full else {
            return false;
        };
        match reminded {
            None => {
                crate::follow::log_disk_full(
                    &path,
                    *free,
                    *needed,
                    "the import is paused",
                    retry_max,
                );
                reminded = Some(Instant::now());
            }
            Some(at) if at.elapsed() >= Duration::from_secs(60) => {
                tracing::warn!(
                    "disk still full: {} free in {}, about {} left to write; the import waits",
                    crate::follow::human_bytes(*free),
                    path.display(),
                    crate::follow::human_bytes(*needed)
                );
                reminded = Some(Instant::now());
            }
            Some(_) => {}
        }
        delay = (delay * 2).clamp(Duration::from_secs(1), retry_max);
        std::thread::sleep(delay);
        true
    }
}

/// Checks that the snapshot's tip is a block of the chain this Osprey
/// follows: `getblockhash(tip height)` on the node (or the blk files) must
/// be the tip's hash. A snapshot of another branch, or of a chain the node
/// has not reached yet, would make the next sync undo or wait for blocks.
fn check_tip_in_best_chain(config: &Config, manifest: &Manifest) -> anyhow::Result<()> {
    let source: Box<dyn ChainSource> = match &config.chain {
        ChainConfig::Node { rpc_addr, auth, .. } => Box::new(
            Daemon::connect(rpc_addr, auth.clone(), config.network).with_context(|| {
                format!("connecting to the node at {rpc_addr} to check the snapshot's tip")
            })?,
        ),
        ChainConfig::BlkFiles { dir } => Box::new(
            BlkFiles::open(dir, config.network)
                .with_context(|| format!("reading blocks from {}", dir.display()))?,
        ),
    };
    let height = Height(manifest.tip_height);
    let (best, _) = source.best_block().context("asking the node for its tip")?;
    if best < height {
        bail!(
            "the node is at height {best}, below the snapshot's tip at {height}: import it once the node has caught up"
        );
    }
    let found = source
        .block_hashes(height, 1)
        .context("asking the node for a block hash")?;
    match found.first() {
        Some(hash) if *hash == manifest.tip_hash => {
            tracing::info!(%height, hash = %manifest.tip_hash, "the snapshot's tip is in the node's best chain");
            Ok(())
        }
        Some(hash) => bail!(
            "the snapshot's tip {} at height {height} is not in the node's best chain (the node has {hash} there): the snapshot is of another branch",
            manifest.tip_hash
        ),
        None => bail!("the node has no block at height {height}"),
    }
}
