//! The chain generator: turns a seed and a [`Shape`] into valid regtest
//! blocks and the manifest of the big wallet's expected answers.
//!
//! Each block is made in three steps. Planning is sequential and holds all
//! the randomness: which coins are spent, where value goes, fees, which
//! wallet addresses are used. Building is a pure function of a plan and runs
//! on every core with rayon: derive fresh keys, assemble and sign the
//! transaction. Connecting is sequential again: register the new coins,
//! record wallet history, add the coinbase, commitments and proof of work.
//! So the same seed gives byte-identical blocks whatever the thread count.
//!
//! Coins are only spent in a later block than the one creating them, so the
//! transactions of a block never depend on each other and can be signed in
//! any order.
//!
//! The code is split by concern: `coins` (what the generator spends and
//! where planned outputs go), `state` (the big wallet, the pools of live
//! coins and the mainnet profile's running counts), `destinations` (who a
//! payment goes to, and the mainnet profile's steering of it), `planning`
//! (choosing each block's transactions), `silent_payments` (making some of
//! them pay silent payments, and recording those), `build` (building and
//! signing a plan, on any thread) and `block` (connecting a block: the
//! coinbase, commitments and proof of work).

use std::path::Path;
use std::time::{Duration, Instant};

use bitcoin::blockdata::constants::genesis_block;
use bitcoin::{Block, BlockHash, Network, ScriptBuf};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use crate::blkfile::{BlkError, BlkWriter};
use crate::manifest::{
    Manifest, PlaceholderSignatures, SilentPaymentReceiver, WalletAddress, WalletManifest,
};
use crate::params::{self, REGTEST_MAGIC};
use crate::shape::{Profile, Shape};
use crate::sign::{Holder, Key, ScriptKind};
use crate::silent::{self, Receiver};
use crate::stats::{ChainStats, OutputClass, SilentPaymentStats, STATS_FILE};
use crate::wallet::{CHANGE, RECEIVE};

use coins::Owner;
use silent_payments::{silent_rng, SilentState};
use state::{Pools, Steering, WalletState};

mod block;
mod build;
mod coins;
mod destinations;
mod planning;
mod silent_payments;
mod state;

#[doc(hidden)]
pub mod bench_support;
#[cfg(test)]
mod tests;

/// Number of miner payout scripts; coinbases pick one, so they are reused.
const MINERS: usize = 6;
/// Key family of the miners and exchanges (fresh keys use the seed).
const FIXED_KEYS_SEED: u64 = u64::MAX;

/// Progress of a running generation, passed to the caller's callback
/// after every block.
#[derive(Clone, Debug)]
pub struct Progress {
    pub height: u32,
    pub tip_height: u32,
    /// Transactions so far, coinbases included.
    pub txs: u64,
    /// Non-coinbase transactions created and signed so far.
    pub transfers: u64,
    pub bytes: u64,
    pub elapsed: Duration,
    /// Time spent choosing transactions (one core).
    pub planning: Duration,
    /// Time spent building and signing transfers (wall clock, all cores).
    pub signing: Duration,
    /// Time generation waited for the writer, which serializes and writes
    /// blocks on a thread of its own alongside.
    pub writing: Duration,
    /// The chain's shape so far.
    pub chain: ChainStats,
}

impl Progress {
    /// Transfers created and signed per second of signing wall time.
    pub fn signed_per_sec(&self) -> f64 {
        self.transfers as f64 / self.signing.as_secs_f64().max(1e-9)
    }

    /// Transactions of every kind per second, end to end.
    pub fn txs_per_sec(&self) -> f64 {
        self.txs as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }
}

/// What a generation run is asked for.
#[derive(Clone, Debug)]
pub struct Config {
    /// Preset name recorded in the manifest ("custom" when overridden).
    pub preset: String,
    pub seed: u64,
    pub shape: Shape,
    pub signatures: Signatures,
}

/// Blocks holding only their coinbase that end a chain with placeholder
/// signatures. Bitcoin Core skips the script checks of a block below its
/// `-assumevalid` block only when the block is buried by more than two
/// weeks of proof-equivalent time under the best header (`ConnectBlock`
/// in validation.cpp: `GetBlockProofEquivalentTime(...) <= 60 * 60 * 24 *
/// 7 * 2` keeps the checks on). At regtest's fixed difficulty and 10-minute
/// spacing that is more than 2,016 blocks, so the last block with
/// placeholders must have at least 2,017 blocks above it (against Bitcoin
/// Core v31.99, 2,016 gets that block rejected and 2,017 does not); 83
/// more are the margin.
pub const CHECKED_TAIL_BLOCKS: u32 = 2_100;

/// How transfers are signed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Signatures {
    /// Real signatures and keys: every node accepts the chain.
    #[default]
    Real,
    /// Placeholder signatures and fresh keys of real sizes
    /// ([`crate::sign::sign_placeholders`], [`PlaceholderKey`]): the same
    /// blocks as [`Signatures::Real`] draws (same transactions, amounts and
    /// script types; sizes differ only as signature lengths do), at a
    /// fraction of the cost, then [`CHECKED_TAIL_BLOCKS`] coinbase-only
    /// blocks. For Bitcoin Core run with `-assumevalid` set to the last
    /// block with placeholders ([`crate::manifest::PlaceholderSignatures`]),
    /// which it then connects without running their scripts.
    ///
    /// [`PlaceholderKey`]: crate::sign::PlaceholderKey
    Placeholder,
}

impl Signatures {
    /// Blocks the chain gets after the shape's.
    pub fn tail_blocks(self) -> u32 {
        match self {
            Signatures::Real => 0,
            Signatures::Placeholder => CHECKED_TAIL_BLOCKS,
        }
    }
}

/// Why generation failed.
#[derive(Debug, thiserror::Error)]
pub enum GenError {
    #[error(transparent)]
    Blk(#[from] BlkError),
    /// Writing `manifest.json` or `stats.json`.
    #[error("writing {path}: {source}")]
    Manifest {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("invalid shape: {0}")]
    Shape(String),
}

/// Produces the chain block by block: genesis first, then heights
/// `1..=shape.blocks`, then the tail of [`Signatures::tail_blocks`].
pub struct Generator {
    config: Config,
    rng: ChaCha8Rng,
    /// Height of the next block [`Generator::next_block`] returns.
    next_height: u32,
    prev_hash: BlockHash,
    pools: Pools,
    next_fresh_key: u64,
    miners: Vec<(Key, ScriptBuf)>,
    exchanges: Vec<(Key, ScriptKind, ScriptBuf)>,
    wallet: WalletState,
    pool_target: usize,
    block_hashes: Vec<BlockHash>,
    tx_count: u64,
    transfer_count: u64,
    input_count: u64,
    output_count: u64,
    planning: Duration,
    signing: Duration,
    /// Shape of the blocks returned so far.
    stats: ChainStats,
    /// Whether each exchange and miner script has been paid yet (to count
    /// reuse without remembering every script).
    exchange_used: Vec<bool>,
    miner_used: [bool; MINERS],
    /// Running counts of the mainnet profile; `None` in the synthetic one.
    steering: Option<Steering>,
    /// Scripts the mainnet profile reuses, by output type.
    reusable: [Vec<(Holder, ScriptKind, ScriptBuf)>; 9],
    /// Silent payments; `None` unless the shape asks for them.
    silent: Option<SilentState>,
}

impl Generator {
    /// Sets up a generator for `config`.
    ///
    /// # Errors
    /// When the shape cannot make a chain (no blocks).
    pub fn new(config: Config) -> Result<Generator, GenError> {
        let shape = &config.shape;
        if shape.blocks == 0 {
            return Err(GenError::Shape(
                "a chain needs at least one block after genesis".into(),
            ));
        }
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        // Only a guard: block times never depend on the clock.
        let blocks = shape.blocks + config.signatures.tail_blocks();
        if !params::chain_fits_before(blocks, now) {
            return Err(GenError::Shape(format!(
                "{blocks} blocks ten minutes apart from {} would end in the future",
                params::FIRST_BLOCK_TIME
            )));
        }
        if shape.wallet_addresses > 1 << 30 {
            return Err(GenError::Shape(
                "wallet_addresses must stay below 2^30".into(),
            ));
        }
        if shape.silent_payments_ppm > 1_000_000 {
            return Err(GenError::Shape(
                "the silent-payment share is at most a million parts per million".into(),
            ));
        }
        let silent = (shape.silent_payments_ppm > 0).then(|| SilentState {
            rng: silent_rng(config.seed),
            receivers: silent::receivers(config.seed),
            payments: vec![Vec::new(); silent::RECEIVERS],
        });
        let stats = ChainStats {
            silent_payments: silent.as_ref().map(|_| SilentPaymentStats::default()),
            ..ChainStats::default()
        };
        let miners = (0..MINERS as u64)
            .map(|i| {
                let key = Key::from_seed(FIXED_KEYS_SEED, i);
                (key, key.script_pubkey(ScriptKind::P2pkh))
            })
            .collect();
        // Exchange kinds cycle so the biggest histories cover several kinds,
        // the biggest of all a legacy script like mainnet's.
        let exchange_kinds = [
            ScriptKind::P2pkh,
            ScriptKind::P2wpkh,
            ScriptKind::P2shP2wpkh,
            ScriptKind::P2tr,
            ScriptKind::P2wsh,
        ];
        let exchanges = (0..shape.exchanges as u64)
            .map(|i| {
                let key = Key::from_seed(FIXED_KEYS_SEED, 1_000 + i);
                let kind = exchange_kinds[i as usize % exchange_kinds.len()];
                (key, kind, key.script_pubkey(kind))
            })
            .collect();
        let genesis = genesis_block(Network::Regtest);
        let pools = Pools {
            exchange: vec![Vec::new(); shape.exchanges as usize],
            ..Pools::default()
        };
        Ok(Generator {
            rng: ChaCha8Rng::seed_from_u64(config.seed),
            next_height: 0,
            prev_hash: genesis.block_hash(),
            pools,
            next_fresh_key: 0,
            miners,
            exchanges,
            wallet: WalletState::new(shape),
            pool_target: (40 * shape.txs_per_block as usize).max(2_000),
            block_hashes: Vec::with_capacity(blocks as usize + 1),
            tx_count: 0,
            transfer_count: 0,
            input_count: 0,
            output_count: 0,
            planning: Duration::ZERO,
            signing: Duration::ZERO,
            stats,
            exchange_used: vec![false; shape.exchanges as usize],
            miner_used: [false; MINERS],
            steering: (shape.profile == Profile::Mainnet).then(Steering::default),
            reusable: Default::default(),
            silent,
            config,
        })
    }

    /// Adds a receiver of the chain's silent payments, besides its own
    /// [`silent::RECEIVERS`]: one whose keys come from elsewhere (a wallet's
    /// seed), paid through its unlabelled address like the others and
    /// listed after them in the manifest. Receivers are drawn uniformly,
    /// so each added one takes a share of the payments.
    ///
    /// # Errors
    /// When the chain pays no silent payments, a block was already made
    /// (the blocks so far would not have paid it), or the receivers would
    /// outnumber what a payment can name.
    pub fn add_silent_receiver(&mut self, receiver: Receiver) -> Result<(), GenError> {
        let Some(state) = &mut self.silent else {
            return Err(GenError::Shape(
                "a silent-payment receiver needs a silent-payment share above 0".into(),
            ));
        };
        if self.next_height > 0 {
            return Err(GenError::Shape(
                "silent-payment receivers are added before the first block".into(),
            ));
        }
        if state.receivers.len() > usize::from(u8::MAX) {
            return Err(GenError::Shape(format!(
                "at most {} silent-payment receivers",
                usize::from(u8::MAX) + 1
            )));
        }
        state.receivers.push(receiver);
        state.payments.push(Vec::new());
        Ok(())
    }

    /// Height of the last block the chain will have.
    pub fn tip_height(&self) -> u32 {
        self.config.shape.blocks + self.config.signatures.tail_blocks()
    }

    /// Draws the blocks from here on with `seed`: generators of one config
    /// that branch after the same block with different seeds make chains
    /// that share every block so far and then fork (a reorg's two sides).
    /// Every branch block differs from its sibling (the seed is in its
    /// coinbase); the branch's transactions spend the coins of the shared
    /// part. The manifest then names `seed`.
    pub fn branch(&mut self, seed: u64) {
        self.config.seed = seed;
        self.rng = ChaCha8Rng::seed_from_u64(seed);
        if let Some(silent) = &mut self.silent {
            silent.rng = silent_rng(seed);
        }
    }

    /// Returns the next block (genesis first), or `None` past the tip.
    pub fn next_block(&mut self) -> Option<Block> {
        let height = self.next_height;
        if height > self.tip_height() {
            return None;
        }
        let block = if height == 0 {
            let genesis = genesis_block(Network::Regtest);
            self.stats.record_tx(&genesis.txdata[0], 0);
            if let Some(steering) = &mut self.steering {
                steering.txs += 1;
                steering.note_outputs([(OutputClass::P2pk, false)]);
            }
            genesis
        } else {
            self.make_block(height)
        };
        self.stats.record_block_end(block.txdata.len());
        self.tx_count += block.txdata.len() as u64;
        for tx in &block.txdata {
            self.input_count += tx.input.len() as u64;
            self.output_count += tx.output.len() as u64;
        }
        self.prev_hash = block.block_hash();
        self.block_hashes.push(self.prev_hash);
        self.next_height += 1;
        Some(block)
    }

    /// The manifest of the chain generated so far (call after the last
    /// block); `blk_files` are the file names the blocks were written to.
    pub fn manifest(&self, blk_files: Vec<String>) -> Manifest {
        let wallet = &self.wallet;
        let mut balances: [Vec<(u64, u32)>; 2] = [
            vec![(0, 0); wallet.keys[0].len()],
            vec![(0, 0); wallet.keys[1].len()],
        ];
        for coin in &self.pools.wallet {
            if let Owner::Wallet { chain, index } = coin.owner {
                let entry = &mut balances[chain as usize][index as usize];
                entry.0 += coin.spend.txout.value.to_sat();
                entry.1 += 1;
            }
        }
        let mut addresses = Vec::new();
        for chain in [RECEIVE, CHANGE] {
            for (index, (key, script)) in wallet.keys[chain as usize].iter().enumerate() {
                let history = &wallet.history[chain as usize][index];
                if history.is_empty() {
                    continue;
                }
                let (balance, utxo_count) = balances[chain as usize][index];
                addresses.push(WalletAddress {
                    address: key
                        .address(ScriptKind::P2wpkh, Network::Regtest)
                        .to_string(),
                    scripthash: osprey_core::ScriptHash::from_script(script.as_bytes()).to_string(),
                    chain,
                    index: index as u32,
                    history: history
                        .iter()
                        .map(|(txid, h)| (txid.to_string(), *h))
                        .collect(),
                    balance,
                    utxo_count,
                });
            }
        }
        let tip_hash = self
            .block_hashes
            .last()
            .map(|h| h.to_string())
            .unwrap_or_default();
        let placeholder_signatures = match self.config.signatures {
            Signatures::Real => None,
            Signatures::Placeholder => {
                let last_height = self.config.shape.blocks;
                self.block_hashes
                    .get(last_height as usize)
                    .map(|hash| PlaceholderSignatures {
                        last_height,
                        assumevalid: hash.to_string(),
                    })
            }
        };
        let silent_payments = self.silent.as_ref().map(|state| {
            state
                .receivers
                .iter()
                .zip(&state.payments)
                .map(|(receiver, payments)| SilentPaymentReceiver {
                    scan_private_key: hex::encode(receiver.scan_secret().secret_bytes()),
                    spend_public_key: receiver.spend_public_key().to_string(),
                    address: receiver.address(),
                    labels: receiver.subscription_labels(),
                    payments: payments.clone(),
                })
                .collect()
        });
        Manifest {
            network: "regtest".to_string(),
            preset: self.config.preset.clone(),
            seed: self.config.seed,
            tip_height: self.block_hashes.len().saturating_sub(1) as u32,
            tip_hash,
            block_hashes: self.block_hashes.iter().map(|h| h.to_string()).collect(),
            tx_count: self.tx_count,
            input_count: self.input_count,
            output_count: self.output_count,
            blk_files,
            wallet: WalletManifest {
                receive_descriptor: wallet.wallet.descriptor(RECEIVE),
                change_descriptor: wallet.wallet.descriptor(CHANGE),
                addresses,
            },
            placeholder_signatures,
            silent_payments,
        }
    }

    fn progress(&self, started: Instant, bytes: u64, writing: Duration) -> Progress {
        Progress {
            height: self.next_height.saturating_sub(1),
            tip_height: self.tip_height(),
            txs: self.tx_count,
            transfers: self.transfer_count,
            bytes,
            elapsed: started.elapsed(),
            planning: self.planning,
            signing: self.signing,
            writing,
            chain: self.stats.clone(),
        }
    }
}

/// Generates the chain of `config` into `out_dir`: `out_dir/blocks/blk*.dat`
/// (genesis first) and `out_dir/manifest.json`. Calls `progress` after every
/// block and returns the manifest.
///
/// # Errors
/// When the shape is invalid or a file cannot be written.
pub fn generate(
    config: Config,
    out_dir: &Path,
    progress: &mut dyn FnMut(&Progress),
) -> Result<(Manifest, Progress), GenError> {
    generate_with(Generator::new(config)?, out_dir, progress)
}

/// Generates the chain of `generator`, set up beyond its config (e.g. with
/// [`Generator::add_silent_receiver`]) and not yet started, as [`generate`].
///
/// # Errors
/// When a file cannot be written.
pub fn generate_with(
    mut generator: Generator,
    out_dir: &Path,
    progress: &mut dyn FnMut(&Progress),
) -> Result<(Manifest, Progress), GenError> {
    let started = Instant::now();
    // A manifest or stats left from an earlier run must not describe the
    // new blocks if this run stops half way.
    let manifest_path = out_dir.join(crate::manifest::MANIFEST_FILE);
    let stats_path = out_dir.join(STATS_FILE);
    for stale in [&manifest_path, &stats_path] {
        match std::fs::remove_file(stale) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(GenError::Manifest {
                    path: stale.clone(),
                    source: e,
                })
            }
            _ => {}
        }
    }
    let writer = BlkWriter::create(&out_dir.join("blocks"), REGTEST_MAGIC)?;
    // Serializing, writing and syncing each full file go on a thread of
    // their own, alongside the generation of the next blocks.
    let (blocks, to_write) = std::sync::mpsc::sync_channel::<Block>(WRITE_QUEUE_BLOCKS);
    let (written, writing) = std::thread::scope(|scope| {
        let writer = scope.spawn(move || write_blocks(writer, to_write));
        let mut waiting = Duration::ZERO;
        let mut bytes = 0;
        while let Some(block) = generator.next_block() {
            // The record: magic, length, block.
            bytes += 8 + block.total_size() as u64;
            let wait_started = Instant::now();
            if blocks.send(block).is_err() {
                // The writer stopped on an error, returned below.
                break;
            }
            waiting += wait_started.elapsed();
            progress(&generator.progress(started, bytes, waiting));
        }
        drop(blocks);
        let written = writer
            .join()
            .unwrap_or_else(|panic| std::panic::resume_unwind(panic));
        (written, waiting)
    });
    let (files, bytes) = written?;
    let manifest = generator.manifest(files);
    manifest
        .save(out_dir)
        .map_err(|source| GenError::Manifest {
            path: manifest_path,
            source,
        })?;
    generator
        .stats
        .save(out_dir)
        .map_err(|source| GenError::Manifest {
            path: stats_path,
            source,
        })?;
    let stats = generator.progress(started, bytes, writing);
    tracing::info!(
        height = manifest.tip_height,
        txs = manifest.tx_count,
        transfers = stats.transfers,
        signed_per_sec = stats.signed_per_sec() as u64,
        "chain generated"
    );
    Ok((manifest, stats))
}

/// Blocks generated ahead of the writer at most.
const WRITE_QUEUE_BLOCKS: usize = 4;

/// Writes the blocks received until the sender hangs up, then finishes the
/// files: their names and the bytes written.
fn write_blocks(
    mut writer: BlkWriter,
    blocks: std::sync::mpsc::Receiver<Block>,
) -> Result<(Vec<String>, u64), BlkError> {
    for block in blocks {
        writer.write_block(&bitcoin::consensus::serialize(&block))?;
    }
    let bytes = writer.bytes_written();
    Ok((writer.finish()?, bytes))
}
