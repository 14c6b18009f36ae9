//! `osprey demo`: no node at hand? Generate a regtest chain with a wallet
//! (`osprey chaingen`, which runs in `osprey-tools`), index it from its blk
//! files and serve it, and tell the user how to point Electrum or Sparrow
//! at it.

use crate::config::ConfigArgs;
use crate::{serve, tools};
use anyhow::Context;
use clap::Args;
use osprey_core::Network;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

#[derive(Args, Debug)]
pub struct DemoArgs {
    /// Chain size: tiny (seconds) or small (~100k transactions)
    #[arg(long, default_value = "tiny")]
    preset: String,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Where the chain and the index go [default: a fresh temporary directory]
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Where Electrum clients connect
    #[arg(long, default_value = "127.0.0.1:60401")]
    electrum_rpc_addr: String,
    #[arg(long, default_value = "info")]
    pub log_filter: String,
}

/// What the demo tells the user about the generated chain, from its
/// `manifest.json`.
struct ChainSummary {
    tip_height: u64,
    tx_count: u64,
    addresses: usize,
    receive_descriptor: String,
    change_descriptor: String,
}

impl ChainSummary {
    fn load(chain: &Path) -> anyhow::Result<ChainSummary> {
        let path = chain.join("manifest.json");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("reading {}", path.display()))?;
        let manifest: serde_json::Value =
            serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))?;
        let field = |pointer: &str| {
            manifest
                .pointer(pointer)
                .with_context(|| format!("{} has no {pointer}", path.display()))
        };
        let number = |pointer: &str| {
            field(pointer)?
                .as_u64()
                .with_context(|| format!("{pointer} in {} is not a number", path.display()))
        };
        let text = |pointer: &str| {
            field(pointer)?
                .as_str()
                .map(str::to_owned)
                .with_context(|| format!("{pointer} in {} is not a string", path.display()))
        };
        Ok(ChainSummary {
            tip_height: number("/tip_height")?,
            tx_count: number("/tx_count")?,
            addresses: field("/wallet/addresses")?.as_array().map_or(0, Vec::len),
            receive_descriptor: text("/wallet/receive_descriptor")?,
            change_descriptor: text("/wallet/change_descriptor")?,
        })
    }
}

pub fn run(args: DemoArgs) -> anyhow::Result<()> {
    let (dir, _temp) = match args.dir {
        Some(dir) => (dir, None),
        None => {
            let temp = tempfile::Builder::new()
                .prefix("osprey-demo-")
                .tempdir()
                .context("creating a temporary directory")?;
            (temp.path().to_path_buf(), Some(temp))
        }
    };
    tracing::info!(preset = args.preset, dir = %dir.display(), "generating a regtest chain");
    let chain_dir = dir.join("chain");
    let generate: Vec<OsString> = vec![
        "--preset".into(),
        args.preset.into(),
        "--seed".into(),
        args.seed.to_string().into(),
        "--out".into(),
        chain_dir.clone().into(),
    ];
    tools::run("chaingen", &generate).context("generating the chain")?;
    let manifest = ChainSummary::load(&chain_dir)?;

    // The demo's own settings over the defaults every `osprey serve` has;
    // no osprey.toml or OSPREY_* variable of the caller's is read.
    let config = ConfigArgs {
        network: Some(Network::Regtest.name().into()),
        db_dir: Some(dir.join("db")),
        blocks_dir: Some(chain_dir.join("blocks")),
        electrum_rpc_addr: Some(args.electrum_rpc_addr.clone()),
        log_filter: Some(args.log_filter.clone()),
        reindex: true,
        banner: Some("Osprey demo: a generated regtest chain".into()),
        ..ConfigArgs::default()
    }
    .over(ConfigArgs::default())
    .context("demo settings")?;
    let stop = Arc::new(AtomicBool::new(false));
    let parts = serve::build(&config, &stop)?;

    let addr = config.electrum_rpc_addr;
    let message = [
        String::new(),
        format!(
            "Osprey demo: {} blocks, {} transactions, serving on {addr} (plain TCP, regtest)",
            manifest.tip_height, manifest.tx_count
        ),
        String::new(),
        format!(
            "  Electrum:  electrum --regtest --oneserver --server {}:{}:t",
            addr.ip(),
            addr.port()
        ),
        "  Sparrow:   start with -n regtest (or File > Switch network > Regtest), then".into(),
        format!(
            "             Preferences > Server > Private Electrum, URL {} port {}, no SSL",
            addr.ip(),
            addr.port()
        ),
        String::new(),
        format!(
            "  The demo wallet (BIP84, {} used addresses); import these descriptors:",
            manifest.addresses
        ),
        format!("    receive: {}", manifest.receive_descriptor),
        format!("    change:  {}", manifest.change_descriptor),
        String::new(),
        "  Stop with Ctrl-C.".into(),
    ]
    .join("\n");
    let runtime = serve::runtime(&config)?;
    {
        let stop = Arc::clone(&stop);
        runtime.spawn(async move {
            let _ = tokio::signal::ctrl_c().await;
            stop.store(true, std::sync::atomic::Ordering::Relaxed);
        });
    }
    // The instructions are the demo's output, for a person to read.
    #[allow(clippy::print_stdout)]
    {
        println!("{message}");
    }
    serve::run_server(&config, parts, runtime, stop)
}
