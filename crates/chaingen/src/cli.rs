//! The `osprey chaingen` command: flags, progress lines on stderr, and the
//! two actions (generate a chain, submit one to a node). The binary's
//! `main` parses [`ChaingenArgs`] and calls [`run`].

use std::path::PathBuf;
use std::str::FromStr;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bitcoin::secp256k1::{PublicKey, SecretKey};
use osprey_chain::rpc::{Auth, RpcClient};

use crate::generate::{generate_with, Config, Generator, Progress, Signatures};
use crate::shape::{Preset, Profile};
use crate::sign::Key;
use crate::silent::Receiver;
use crate::submit::{submit_chain, submit_headers, SubmitLimits, SubmitProgress};

/// `osprey chaingen --preset P --seed S --out DIR` generates a chain;
/// `osprey chaingen submit --dir DIR ...` feeds one to a node.
#[derive(clap::Args, Debug)]
#[command(args_conflicts_with_subcommands = true, subcommand_negates_reqs = true)]
pub struct ChaingenArgs {
    #[command(subcommand)]
    pub command: Option<ChaingenCommand>,
    #[command(flatten)]
    pub generate: GenerateArgs,
}

#[derive(clap::Subcommand, Debug)]
pub enum ChaingenCommand {
    /// Submit a generated chain to a running regtest node (btcd or Bitcoin
    /// Core) with `submitblock`, skipping blocks it already has.
    Submit(SubmitArgs),
}

/// Flags of chain generation. Shape flags override the preset.
#[derive(clap::Args, Debug)]
pub struct GenerateArgs {
    /// Chain size: tiny (tests), small (~100k txs), medium (~1M), large
    /// (~10M), or mainnet (1M txs shaped like mainnet; size it with --txs).
    #[arg(long, default_value = "tiny")]
    pub preset: Preset,
    /// Seed of the chain: the same seed gives byte-identical blocks.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Output directory: receives `blocks/blk*.dat` and `manifest.json`.
    #[arg(long, required = true)]
    pub out: Option<PathBuf>,
    /// Height of the last block.
    #[arg(long, conflicts_with = "txs")]
    pub blocks: Option<u32>,
    /// Transactions wanted: sets the blocks to txs / txs-per-block (exact
    /// in the mainnet preset, about that many in the others).
    #[arg(long)]
    pub txs: Option<u64>,
    /// Average transfers per block once coins are mature.
    #[arg(long)]
    pub txs_per_block: Option<u32>,
    /// Used addresses of the big wallet (receive + change).
    #[arg(long)]
    pub wallet_addresses: Option<u32>,
    /// Number of exchange scripts with very long histories.
    #[arg(long)]
    pub exchanges: Option<u32>,
    /// Percent of payments to an already used script.
    #[arg(long)]
    pub reuse_percent: Option<u32>,
    /// Worker threads for signing (default: one per core).
    #[arg(long)]
    pub threads: Option<usize>,
    /// For scale runs only: placeholder signatures and fresh keys instead
    /// of real ones, well-formed and of real sizes, in the same blocks the
    /// seed draws otherwise (same transactions, amounts and script types),
    /// about ten times faster; then 2,100 blocks holding only their
    /// coinbase.
    /// Only Bitcoin Core accepts the chain, run with
    /// -assumevalid=<the hash printed at the end, also in manifest.json>
    /// and knowing every header before it connects the blocks (-reindex
    /// from the blk files, or `osprey chaingen submit`, which sends them
    /// first). It checks the scripts of the last 2,016 blocks only, which
    /// hold no placeholder.
    #[arg(long)]
    pub placeholder_signatures: bool,
    /// Share (0 to 1) of the transfers able to pay a silent payment
    /// (BIP-352) that pay one or two outputs to the chain's 8 receivers,
    /// listed with their payments in manifest.json. With placeholder
    /// signatures only transfers whose counted inputs all have real keys
    /// (the big wallet's, exchanges', miners') can pay, as the sender needs
    /// their secrets.
    #[arg(long, default_value_t = 0.0)]
    pub sp_share: f64,
    /// One more silent-payment receiver, as SCAN_SECRET:SPEND_PUBLIC_KEY
    /// (hex, 32 and 33 bytes): a wallet's, whose seed gives its keys. Paid
    /// through its unlabelled address like the chain's own receivers (after
    /// which manifest.json lists it); needs --sp-share. Repeatable.
    #[arg(long, value_parser = parse_sp_receiver)]
    pub sp_receiver: Vec<SpReceiverKeys>,
    /// One more silent-payment receiver, as --sp-receiver: the wallet
    /// Sparrow restores from this BIP-39 mnemonic (no passphrase, account
    /// 0; BIP-352's m/352'/1'/0' paths). Repeatable.
    #[arg(long)]
    pub sp_receiver_mnemonic: Vec<String>,
}

/// The keys of a receiver given with `--sp-receiver`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpReceiverKeys {
    pub scan_secret: SecretKey,
    pub spend_public_key: PublicKey,
}

fn parse_sp_receiver(text: &str) -> Result<SpReceiverKeys, String> {
    let (scan, spend) = text
        .split_once(':')
        .ok_or("expected SCAN_SECRET:SPEND_PUBLIC_KEY, in hex")?;
    let scan_secret = SecretKey::from_str(scan)
        .map_err(|e| format!("the scan secret is not a 32-byte hex secret key: {e}"))?;
    let spend_public_key = PublicKey::from_str(spend)
        .map_err(|e| format!("the spend key is not a 33-byte hex public key: {e}"))?;
    Ok(SpReceiverKeys {
        scan_secret,
        spend_public_key,
    })
}

/// Flags of `osprey chaingen submit`.
#[derive(clap::Args, Debug)]
pub struct SubmitArgs {
    /// Directory written by `osprey chaingen --out`.
    #[arg(long)]
    pub dir: PathBuf,
    /// The node's JSON-RPC address (btcd regtest: 18334, Core regtest: 18443).
    #[arg(long, default_value = "127.0.0.1:18443")]
    pub daemon_rpc_addr: String,
    /// RPC credentials as USER:PASS.
    #[arg(
        long,
        env = "OSPREY_DAEMON_AUTH",
        conflicts_with = "cookie_file",
        hide_env_values = true
    )]
    pub auth: Option<String>,
    /// Bitcoin Core's cookie file, instead of --auth.
    #[arg(long)]
    pub cookie_file: Option<PathBuf>,
}

/// Runs `osprey chaingen`.
///
/// # Errors
/// Anything that stops generation or submission, with context.
pub fn run(args: ChaingenArgs) -> anyhow::Result<()> {
    match args.command {
        Some(ChaingenCommand::Submit(submit)) => run_submit(submit),
        None => run_generate(args.generate),
    }
}

/// Calls `f` at most once per second (and always for the last call).
struct Throttle {
    last: Option<Instant>,
}

impl Throttle {
    fn due(&mut self, last_call: bool) -> bool {
        let due = last_call
            || self
                .last
                .is_none_or(|t| t.elapsed() >= Duration::from_secs(1));
        if due {
            self.last = Some(Instant::now());
        }
        due
    }
}

// The command's whole output is progress for the person running it, on
// stderr so stdout stays clean for scripts.
#[allow(clippy::print_stderr)]
fn run_generate(args: GenerateArgs) -> anyhow::Result<()> {
    let out = args.out.context("--out DIR is required")?;
    let mut shape = args.preset.shape();
    let overrides = [
        (args.blocks, &mut shape.blocks),
        (args.txs_per_block, &mut shape.txs_per_block),
        (args.wallet_addresses, &mut shape.wallet_addresses),
        (args.exchanges, &mut shape.exchanges),
        (args.reuse_percent, &mut shape.reuse_percent),
    ];
    let mut custom = false;
    for (value, field) in overrides {
        if let Some(value) = value {
            *field = value;
            custom = true;
        }
    }
    // The preset's shape at another size is still that preset.
    if let Some(txs) = args.txs {
        shape.blocks = crate::Shape::blocks_for_txs(txs, shape.txs_per_block);
    }
    if shape.reuse_percent > 100 {
        bail!("--reuse-percent must be at most 100");
    }
    if !(0.0..=1.0).contains(&args.sp_share) {
        bail!("--sp-share must be from 0 to 1");
    }
    shape.silent_payments_ppm = (args.sp_share * 1e6).round() as u32;
    let preset = if custom {
        "custom".to_string()
    } else {
        args.preset.name().to_string()
    };
    let config = Config {
        preset,
        seed: args.seed,
        shape,
        signatures: if args.placeholder_signatures {
            Signatures::Placeholder
        } else {
            Signatures::Real
        },
    };
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(args.threads.unwrap_or(0))
        .build()
        .context("starting signing threads")?;
    eprintln!(
        "chaingen: {} chain{}, seed {}, {} blocks, ~{} txs/block, {} wallet addresses, {} threads -> {}",
        config.preset,
        match config.signatures {
            Signatures::Real => "",
            Signatures::Placeholder => " with placeholder signatures",
        },
        config.seed,
        config.shape.blocks + config.signatures.tail_blocks(),
        config.shape.txs_per_block,
        config.shape.wallet_addresses,
        pool.current_num_threads(),
        out.display()
    );
    let mut throttle = Throttle { last: None };
    let mut report = |p: &Progress| {
        if throttle.due(p.height == p.tip_height) {
            eprintln!(
                "height {:>7}/{}  txs {:>10}  {:>8.0} tx/s  signed {:>8.0} tx/s  {:>7.1} MB",
                p.height,
                p.tip_height,
                p.txs,
                p.txs_per_sec(),
                p.signed_per_sec(),
                p.bytes as f64 / 1e6
            );
        }
    };
    let profile = config.shape.profile;
    let mut generator = Generator::new(config)?;
    for keys in &args.sp_receiver {
        generator.add_silent_receiver(Receiver::with_spend_public_key(
            Key::from_secret(keys.scan_secret),
            keys.spend_public_key,
            &[],
        ))?;
    }
    for mnemonic in &args.sp_receiver_mnemonic {
        let receiver = crate::silent::receiver_of_mnemonic(mnemonic)
            .map_err(|e| anyhow::anyhow!("--sp-receiver-mnemonic: {e}"))?;
        generator.add_silent_receiver(receiver)?;
    }
    let (manifest, stats) = pool
        .install(|| generate_with(generator, &out, &mut report))
        .with_context(|| format!("generating chain into {}", out.display()))?;
    eprintln!(
        "done: {} blocks, {} txs ({} inputs, {} outputs), {:.1} MB in {} files, {:.1} s ({:.0} tx/s); \
         {} transfers created and signed at {:.0} tx/s; wallet: {} used addresses; tip {}",
        manifest.tip_height + 1,
        manifest.tx_count,
        manifest.input_count,
        manifest.output_count,
        stats.bytes as f64 / 1e6,
        manifest.blk_files.len(),
        stats.elapsed.as_secs_f64(),
        stats.txs_per_sec(),
        stats.transfers,
        stats.signed_per_sec(),
        manifest.wallet.addresses.len(),
        manifest.tip_hash
    );
    let secs = |d: Duration| d.as_secs_f64();
    eprintln!(
        "time: planning {:.1} s, building and signing {:.1} s, writing {:.1} s, other {:.1} s",
        secs(stats.planning),
        secs(stats.signing),
        secs(stats.writing),
        secs(
            stats
                .elapsed
                .saturating_sub(stats.planning + stats.signing + stats.writing)
        )
    );
    eprintln!("{}", stats.chain);
    if let Some(receivers) = &manifest.silent_payments {
        eprintln!(
            "silent payments to {} receivers, listed with their keys in manifest.json",
            receivers.len()
        );
    }
    if profile == Profile::Mainnet {
        for d in crate::mainnet::compare(&stats.chain) {
            eprintln!(
                "{:<20} mainnet {:>10.4}  chain {:>10.4}  {:>+6.1}%{}",
                d.measure,
                d.target,
                d.measured,
                100.0 * d.relative(),
                if d.within_tolerance() { "" } else { "  (off)" }
            );
        }
    }
    if let Some(placeholders) = &manifest.placeholder_signatures {
        eprintln!(
            "placeholder signatures up to height {}, then {} coinbase-only blocks: \
             load into Bitcoin Core with every header known first (-reindex, or \
             `osprey chaingen submit`) and\n  -assumevalid={}",
            placeholders.last_height,
            manifest.tip_height - placeholders.last_height,
            placeholders.assumevalid
        );
    }
    Ok(())
}

#[allow(clippy::print_stderr)] // progress for the person running the command
fn run_submit(args: SubmitArgs) -> anyhow::Result<()> {
    let auth = match (args.auth, args.cookie_file) {
        (Some(auth), _) => {
            let (user, pass) = auth.split_once(':').context("--auth must be USER:PASS")?;
            Auth::UserPass(user.to_string(), pass.to_string())
        }
        (None, Some(cookie)) => Auth::CookieFile(cookie),
        (None, None) => {
            bail!("give the node's credentials with --auth USER:PASS or --cookie-file PATH")
        }
    };
    let rpc = RpcClient::new(&args.daemon_rpc_addr, auth);
    let blocks_dir = args.dir.join("blocks");
    let manifest = crate::Manifest::load(&args.dir).ok();
    let tip_height = manifest.as_ref().map(|m| m.tip_height);
    if let Some(placeholders) = manifest
        .as_ref()
        .and_then(|m| m.placeholder_signatures.as_ref())
    {
        // Core skips script checks only below a best header two weeks of
        // work above the block, so it must know every header first.
        let sent = submit_headers(&blocks_dir, &rpc).with_context(|| {
            format!(
                "submitting the headers of {} to {}",
                blocks_dir.display(),
                args.daemon_rpc_addr
            )
        })?;
        eprintln!(
            "sent {sent} headers first: the chain has placeholder signatures, \
             which the node accepts only when run with -assumevalid={}",
            placeholders.assumevalid
        );
    }
    let mut throttle = Throttle { last: None };
    let mut report = |p: &SubmitProgress| {
        if throttle.due(Some(p.height) == tip_height) {
            let secs = p.elapsed.as_secs_f64().max(1e-9);
            eprintln!(
                "height {:>7}/{}  submitted {:>7}  {:>6.0} blocks/s  {:>6.1} MB/s",
                p.height,
                tip_height.map_or("?".to_string(), |h| h.to_string()),
                p.submitted,
                f64::from(p.submitted) / secs,
                p.bytes as f64 / 1e6 / secs
            );
        }
    };
    let done = submit_chain(&blocks_dir, &rpc, &SubmitLimits::default(), &mut report)
        .with_context(|| {
            format!(
                "submitting {} to {}",
                blocks_dir.display(),
                args.daemon_rpc_addr
            )
        })?;
    let tip: String = rpc
        .call("getbestblockhash", &[])
        .context("asking the node for its tip")?;
    if let Some(manifest) = &manifest {
        if tip != manifest.tip_hash {
            bail!(
                "node tip is {tip}, the manifest's tip is {} at height {}",
                manifest.tip_hash,
                manifest.tip_height
            );
        }
    }
    eprintln!(
        "done: node is at height {} ({tip}); {} blocks submitted, {} already known, {:.1} s",
        done.height,
        done.submitted,
        done.skipped,
        done.elapsed.as_secs_f64()
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser, Debug)]
    struct Cli {
        #[command(flatten)]
        chaingen: ChaingenArgs,
    }

    /// How the `osprey` binary nests the command.
    #[derive(Parser, Debug)]
    enum Osprey {
        Chaingen(ChaingenArgs),
    }

    #[test]
    fn parses_as_a_subcommand_of_the_binary() {
        let Osprey::Chaingen(args) =
            Osprey::try_parse_from(["osprey", "chaingen", "--preset", "medium", "--out", "d"])
                .unwrap();
        assert!(args.command.is_none());
        assert_eq!(args.generate.preset, Preset::Medium);
        let Osprey::Chaingen(args) = Osprey::try_parse_from([
            "osprey", "chaingen", "submit", "--dir", "d", "--auth", "u:p",
        ])
        .unwrap();
        assert!(matches!(args.command, Some(ChaingenCommand::Submit(_))));
    }

    #[test]
    fn parses_generate_and_submit_forms() {
        let cli = Cli::try_parse_from([
            "chaingen", "--preset", "small", "--seed", "9", "--out", "/tmp/x",
        ])
        .unwrap();
        assert!(cli.chaingen.command.is_none());
        assert_eq!(cli.chaingen.generate.preset, Preset::Small);
        assert_eq!(cli.chaingen.generate.seed, 9);
        assert_eq!(
            cli.chaingen.generate.sp_share, 0.0,
            "no silent payments by default"
        );
        let cli =
            Cli::try_parse_from(["chaingen", "--sp-share", "0.05", "--out", "/tmp/x"]).unwrap();
        assert_eq!(cli.chaingen.generate.sp_share, 0.05);
        assert!(cli.chaingen.generate.sp_receiver.is_empty());
        let scan = "0f694e068028a717f8af6b9411f9a133dd3565258714cc226594b34db90c1f2c";
        let spend = "03bc95144daf15336db3456825c70ced0a4462f89aca42c4921ee7ccb2b3a44796";
        let receiver = format!("{scan}:{spend}");
        let cli =
            Cli::try_parse_from(["chaingen", "--sp-receiver", &receiver, "--out", "x"]).unwrap();
        assert_eq!(
            cli.chaingen.generate.sp_receiver,
            [SpReceiverKeys {
                scan_secret: scan.parse().unwrap(),
                spend_public_key: spend.parse().unwrap(),
            }]
        );
        for bad in [scan, &format!("{spend}:{scan}"), &format!("{scan}:02ab")] {
            assert!(
                Cli::try_parse_from(["chaingen", "--sp-receiver", bad, "--out", "x"]).is_err(),
                "{bad}"
            );
        }

        let cli = Cli::try_parse_from([
            "chaingen",
            "submit",
            "--dir",
            "/tmp/x",
            "--daemon-rpc-addr",
            "127.0.0.1:18334",
            "--auth",
            "u:p",
        ])
        .unwrap();
        match cli.chaingen.command {
            Some(ChaingenCommand::Submit(s)) => {
                assert_eq!(s.daemon_rpc_addr, "127.0.0.1:18334");
                assert_eq!(s.auth.as_deref(), Some("u:p"));
            }
            None => panic!("submit not parsed"),
        }

        assert!(Cli::try_parse_from(["chaingen", "--preset", "huge", "--out", "x"]).is_err());
        assert!(
            Cli::try_parse_from(["chaingen", "--preset", "tiny"]).is_err(),
            "--out is required"
        );
    }
}
