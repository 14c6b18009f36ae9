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
    /// Also pay silent payments (BIP-352), some to the wallet Sparrow
    /// restores from a printed public demo seed, and serve them
    #[arg(long)]
    silent_payments: bool,
}

/// The public demo seed whose silent-payment wallet the demo chain pays
/// (`--silent-payments`). Its entropy is the first 16 bytes of SHA-256 of
/// "osprey demo silent payments", so its checksum is valid and Sparrow
/// accepts it; anyone can read it here, so it must never hold real coins.
const DEMO_MNEMONIC: &str =
    "payment only planet draft bunker blur ceiling thing spawn unaware surround party";

/// Share of the transfers able to pay a silent payment that do, in a demo
/// with silent payments: the tiny chain then pays the demo wallet a few
/// dozen times.
const DEMO_SP_SHARE: &str = "0.5";

/// A day before the demo chain's first block (chaingen's
/// `params::FIRST_BLOCK_TIME`, 2017-07-14 02:40 UTC), in every time zone:
/// the birth date that makes a Sparrow silent-payment wallet scan the whole
/// chain (Sparrow sends the birth date as the subscription's `start`; an
/// imported wallet without one gets today's, which finds nothing here).
const DEMO_BIRTH_DATE: &str = "2017-07-13";

/// What the demo tells the user about the generated chain, from its
/// `manifest.json`.
struct ChainSummary {
    tip_height: u64,
    tx_count: u64,
    addresses: usize,
    receive_descriptor: String,
    change_descriptor: String,
    /// With `--silent-payments`: the demo seed's wallet, listed last among
    /// the receivers.
    demo_receiver: Option<DemoReceiver>,
}

/// What the chain paid the demo seed's silent-payment wallet.
struct DemoReceiver {
    address: String,
    /// Transactions paying it.
    payments: usize,
    outputs: usize,
    sats: u64,
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
        let demo_receiver = match manifest.pointer("/silent_payments") {
            None | Some(serde_json::Value::Null) => None,
            Some(receivers) => {
                let last = receivers
                    .as_array()
                    .and_then(|all| all.last())
                    .with_context(|| {
                        format!("{} lists no silent-payment receiver", path.display())
                    })?;
                let payments = last["payments"].as_array().with_context(|| {
                    format!(
                        "the last receiver in {} has no payments list",
                        path.display()
                    )
                })?;
                let outputs: Vec<&serde_json::Value> = payments
                    .iter()
                    .filter_map(|p| p["outputs"].as_array())
                    .flatten()
                    .collect();
                Some(DemoReceiver {
                    address: last["address"]
                        .as_str()
                        .with_context(|| {
                            format!("the last receiver in {} has no address", path.display())
                        })?
                        .to_owned(),
                    payments: payments.len(),
                    outputs: outputs.len(),
                    sats: outputs.iter().filter_map(|o| o["value"].as_u64()).sum(),
                })
            }
        };
        Ok(ChainSummary {
            demo_receiver,
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
    let mut generate: Vec<OsString> = vec![
        "--preset".into(),
        args.preset.into(),
        "--seed".into(),
        args.seed.to_string().into(),
        "--out".into(),
        chain_dir.clone().into(),
    ];
    if args.silent_payments {
        generate.extend([
            "--sp-share".into(),
            DEMO_SP_SHARE.into(),
            "--sp-receiver-mnemonic".into(),
            DEMO_MNEMONIC.into(),
        ]);
    }
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
        silent_payments: Some(args.silent_payments),
        banner: Some("Osprey demo: a generated regtest chain".into()),
        ..ConfigArgs::default()
    }
    .over(ConfigArgs::default())
    .context("demo settings")?;
    let stop = Arc::new(AtomicBool::new(false));
    let parts = serve::build(&config, &stop)?;

    let addr = config.electrum_rpc_addr;
    let mut message = vec![
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
    ];
    if let Some(receiver) = &manifest.demo_receiver {
        message.extend(silent_payments_message(receiver));
    }
    message.push("  Stop with Ctrl-C.".into());
    let message = message.join("\n");
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

/// How to see the demo seed's silent payments in Sparrow (its menus and
/// dialogs as Sparrow 2.x names them).
fn silent_payments_message(receiver: &DemoReceiver) -> Vec<String> {
    vec![
        format!(
            "  Silent payments: the chain pays {} transactions ({} outputs, {} sats) to",
            receiver.payments, receiver.outputs, receiver.sats
        ),
        format!("    {}", receiver.address),
        "  the wallet of this PUBLIC DEMO SEED (BIP-39, no passphrase; anyone can read it:".into(),
        "  never use it for real funds):".into(),
        format!("    {DEMO_MNEMONIC}"),
        "  To see them in Sparrow (regtest, connected as above):".into(),
        "    File > New Wallet, any name; tick \"Has existing transactions starting from\"".into(),
        format!("    and pick {DEMO_BIRTH_DATE} (the chain's blocks are dated from 2017-07-14);"),
        "    Policy Type: Single Signature SP; New or Imported Software Wallet >".into(),
        "    Mnemonic Words (BIP39) > Use 12 Words: enter the seed, Import Keystore; Apply.".into(),
        format!(
            "    The wallet's address is the one above; its history lists the {} transactions.",
            receiver.payments
        ),
        String::new(),
    ]
}
