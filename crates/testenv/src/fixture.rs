//! Generated chains as test fixtures: a chaingen chain in a temporary
//! directory (removed on drop) with its manifest, ready to be read from its
//! blk files or loaded into a node.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use osprey_chaingen::submit::{submit_chain, SubmitLimits};
use osprey_chaingen::{generate, Config, Manifest, Preset, Shape, Signatures};

use crate::node::Node;

/// A generated chain on disk: `dir()/blocks/blk*.dat` and
/// `dir()/manifest.json`.
pub struct ChainFixture {
    dir: tempfile::TempDir,
    pub manifest: Manifest,
}

impl ChainFixture {
    /// Generates the chain of `config` into a new temporary directory.
    ///
    /// # Errors
    /// When generation fails.
    pub fn generate(config: Config) -> Result<ChainFixture> {
        let dir = tempfile::Builder::new().prefix("osprey-chain-").tempdir()?;
        let (manifest, _) =
            generate(config, dir.path(), &mut |_| {}).context("generating a test chain")?;
        Ok(ChainFixture { dir, manifest })
    }

    /// The `tiny` preset with `seed` (about a second in a debug build).
    ///
    /// # Errors
    /// When generation fails.
    pub fn tiny(seed: u64) -> Result<ChainFixture> {
        ChainFixture::generate(Config {
            preset: "tiny".into(),
            seed,
            shape: Preset::Tiny.shape(),
            signatures: Signatures::Real,
        })
    }

    /// A custom shape, recorded as preset "custom".
    ///
    /// # Errors
    /// When generation fails.
    pub fn with_shape(shape: Shape, seed: u64) -> Result<ChainFixture> {
        ChainFixture::generate(Config {
            preset: "custom".into(),
            seed,
            shape,
            signatures: Signatures::Real,
        })
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn blocks_dir(&self) -> PathBuf {
        self.dir.path().join("blocks")
    }

    /// Submits the chain to `node` (which must be on regtest and share its
    /// blocks so far) and checks that the node's tip is the chain's tip.
    ///
    /// # Errors
    /// When the node rejects a block or ends on another tip.
    pub fn load_into(&self, node: &dyn Node) -> Result<()> {
        submit_chain(
            &self.blocks_dir(),
            node.rpc(),
            &SubmitLimits::default(),
            &mut |_| {},
        )
        .with_context(|| format!("loading the chain into the node at {}", node.rpc_addr()))?;
        let (height, hash) = node.tip()?;
        anyhow::ensure!(
            hash.to_string() == self.manifest.tip_hash,
            "node tip {hash} at {height}, chain tip {} at {}",
            self.manifest.tip_hash,
            self.manifest.tip_height
        );
        Ok(())
    }
}
