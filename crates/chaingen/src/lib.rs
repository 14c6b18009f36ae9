//! Seeded synthetic regtest chains shaped like mainnet, and the manifest of
//! the answers an exact server must give about them.
//!
//! - [`generate`] makes the blocks (valid for btcd 0.24.2 and Bitcoin Core
//!   regtest) and the [`manifest::Manifest`] oracle;
//! - [`blkfile`] writes Bitcoin Core `blk*.dat` files and reads them back
//!   (through `osprey_chain::BlocksDir`, the one reader of the format);
//! - [`sign`] holds the keys and signing code, shared with `osprey-testenv`;
//! - [`silent`] makes silent payments (BIP-352) to receivers derived from
//!   the seed, with spdk's sender, when asked for (`--sp-share`);
//! - [`submit`] feeds a generated chain to a running node;
//! - [`cli`] is the `osprey chaingen` command.
//!
//! Output of `osprey chaingen --preset P --seed S --out DIR`:
//! `DIR/blocks/blk00000.dat, ...` (Core's format, regtest magic, no XOR,
//! files rolled at 128 MiB, genesis first, so `bitcoind -reindex` loads
//! them), `DIR/manifest.json` and `DIR/stats.json` ([`stats`]: transactions
//! per block, inputs and outputs per transaction, output types, address
//! reuse, sizes).
//!
//! The `mainnet` preset ([`shape::Profile::Mainnet`], sized with `--txs`)
//! steers those measures to the published whole-chain figures of
//! [`mainnet`]; from ~700k transactions up every one is within 10% (below
//! that the legacy blocks before segwit activates at height 432 are too
//! large a share). 700k transactions take ~85 s of CPU, 90% of it signing
//! (secp256k1 point multiplications: signatures, fresh keys, taproot
//! tweaks): ~8k transactions per CPU-second.
//!
//! Measured on the 2-core development machine, shared with other builds
//! (release build, `examples/chaingen.rs`; `examples/chainstats.rs` for the
//! shape):
//!
//! | preset | blocks | transactions | blk data | time |
//! |---|---|---|---|---|
//! | tiny | 481 | ~1.3k | 0.4 MB | 0.1 s (~0.5 s debug) |
//! | small | 1,001 | ~103k | 43 MB | 6 s |
//! | medium | 2,501 | ~980k | 417 MB | 61 s |
//! | large | 5,001 | ~9.7M | 4.1 GB | 13.5 min (niced, busy machine) |
//!
//! `--placeholder-signatures` ([`Signatures::Placeholder`]) makes the same
//! blocks without a point multiplication: placeholder keys for fresh
//! outputs and placeholder signatures of real form and size, then
//! [`CHECKED_TAIL_BLOCKS`] coinbase-only blocks. Only Bitcoin Core accepts
//! such a chain, with `-assumevalid` ([`manifest::PlaceholderSignatures`]);
//! it is for scale runs: `--preset mainnet --txs 10000000` takes ~100 s
//! instead of ~26 min (crates/bench/runs/2026-11-26-chaingen-scale).
//!
//! Every preset averages ~2.2 inputs and ~2.6 outputs per transfer; the
//! busiest exchange script of `large` has ~490k history rows. The
//! `sign_transactions` bench builds and signs 10,000 transfers in ~0.4 s on
//! both cores (~0.85 s on one).

pub mod blkfile;
pub mod cli;
pub mod generate;
pub mod mainnet;
pub mod manifest;
pub mod params;
pub mod shape;
pub mod sign;
pub mod silent;
pub mod stats;
pub mod submit;
pub mod wallet;

pub use blkfile::{read_blocks, read_raw_blocks, BlkError, RawBlock};
pub use cli::{run, ChaingenArgs};
pub use generate::{
    generate, generate_with, Config, GenError, Generator, Progress, Signatures, CHECKED_TAIL_BLOCKS,
};
pub use manifest::{Manifest, PlaceholderSignatures};
pub use shape::{Preset, Profile, Shape};
pub use stats::ChainStats;
