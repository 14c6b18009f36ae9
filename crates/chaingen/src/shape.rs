//! What a generated chain looks like: the presets and the knobs that
//! override them. Plain data; the generator reads it.

use std::fmt;
use std::str::FromStr;

/// Size and shape of a chain. Every field has a preset value; flags may
/// override any of them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Shape {
    /// Height of the last block (the chain has `blocks + 1` blocks with
    /// genesis).
    pub blocks: u32,
    /// Average number of non-coinbase transactions per block once coins
    /// are mature (early blocks carry fewer, late blocks more, like mainnet).
    pub txs_per_block: u32,
    /// Used addresses (receive plus change) the big wallet should end with.
    pub wallet_addresses: u32,
    /// Number of "exchange" scripts that collect very long histories.
    pub exchanges: u32,
    /// Percent of payments that go to an already used script (in the
    /// mainnet profile: of all outputs, OP_RETURN excluded).
    pub reuse_percent: u32,
    /// How transactions are drawn.
    pub profile: Profile,
    /// Parts per million of the transfers able to pay a silent payment
    /// (BIP-352: an input of a kind that counts, every such input's secret
    /// key known) that pay one ([`crate::silent`]); 0 in every preset, so
    /// their chains have none.
    pub silent_payments_ppm: u32,
}

/// How the generator draws transactions.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// Fixed distributions, blocks filling up over the chain: the shape the
    /// benchmarks were calibrated with.
    Synthetic,
    /// Steered so the whole chain's counts follow the figures of
    /// [`crate::mainnet`]: every block carries the same share of the
    /// transactions, and output types, reuse, OP_RETURNs and data
    /// envelopes are chosen to close the gap between the running counts
    /// and the targets.
    Mainnet,
}

/// Named shapes: `tiny` for tests, then roughly 100k, 1M and 10M
/// transactions, and `mainnet` (1M transactions shaped like mainnet; size
/// it with `--txs`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Preset {
    Tiny,
    Small,
    Medium,
    Large,
    Mainnet,
}

impl Preset {
    pub const ALL: [Preset; 5] = [
        Preset::Tiny,
        Preset::Small,
        Preset::Medium,
        Preset::Large,
        Preset::Mainnet,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Preset::Tiny => "tiny",
            Preset::Small => "small",
            Preset::Medium => "medium",
            Preset::Large => "large",
            Preset::Mainnet => "mainnet",
        }
    }

    /// The preset's shape.
    pub fn shape(self) -> Shape {
        match self {
            // Just past btcd's segwit activation (432) so witness spends are
            // exercised; a second to generate in a debug build.
            Preset::Tiny => Shape {
                blocks: 480,
                txs_per_block: 2,
                wallet_addresses: 24,
                exchanges: 3,
                reuse_percent: 15,
                profile: Profile::Synthetic,
                silent_payments_ppm: 0,
            },
            Preset::Small => Shape {
                blocks: 1_000,
                txs_per_block: 125,
                wallet_addresses: 300,
                exchanges: 6,
                reuse_percent: 15,
                profile: Profile::Synthetic,
                silent_payments_ppm: 0,
            },
            Preset::Medium => Shape {
                blocks: 2_500,
                txs_per_block: 420,
                wallet_addresses: 3_000,
                exchanges: 10,
                reuse_percent: 15,
                profile: Profile::Synthetic,
                silent_payments_ppm: 0,
            },
            Preset::Large => Shape {
                blocks: 5_000,
                txs_per_block: 2_050,
                wallet_addresses: 3_000,
                exchanges: 12,
                reuse_percent: 15,
                profile: Profile::Synthetic,
                silent_payments_ppm: 0,
            },
            Preset::Mainnet => {
                let txs_per_block = crate::mainnet::TXS_PER_BLOCK.round() as u32;
                Shape {
                    blocks: Shape::blocks_for_txs(1_000_000, txs_per_block),
                    txs_per_block,
                    wallet_addresses: 3_000,
                    exchanges: 12,
                    reuse_percent: (crate::mainnet::REUSE_RATE * 100.0).round() as u32,
                    profile: Profile::Mainnet,
                    silent_payments_ppm: 0,
                }
            }
        }
    }
}

impl Shape {
    /// Height of the last block of a chain of about `txs` transactions at
    /// `txs_per_block` (genesis included; exact in the mainnet profile,
    /// which spreads the transactions to that average).
    pub fn blocks_for_txs(txs: u64, txs_per_block: u32) -> u32 {
        let blocks = txs.div_ceil(u64::from(txs_per_block.max(1)));
        u32::try_from(blocks.saturating_sub(1).max(1)).unwrap_or(u32::MAX)
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown preset name.
#[derive(Debug, thiserror::Error)]
#[error("unknown preset {0:?}: expected tiny, small, medium, large or mainnet")]
pub struct UnknownPreset(pub String);

impl FromStr for Preset {
    type Err = UnknownPreset;
    fn from_str(s: &str) -> Result<Preset, UnknownPreset> {
        Preset::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| UnknownPreset(s.to_string()))
    }
}
