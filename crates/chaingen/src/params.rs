//! The regtest consensus rules a generated block must satisfy on both btcd
//! 0.24.2 and Bitcoin Core: difficulty, subsidy, soft-fork signalling and
//! activation, timestamps. Pure functions of the height; no state.

use bitcoin::block::Version;
use bitcoin::{Amount, CompactTarget};

/// Regtest proof-of-work limit (compact form); neither node retargets on
/// regtest.
pub const REGTEST_BITS_U32: u32 = 0x207f_ffff;

/// [`REGTEST_BITS_U32`] as rust-bitcoin's type.
pub fn regtest_bits() -> CompactTarget {
    CompactTarget::from_consensus(REGTEST_BITS_U32)
}

/// Bitcoin Core's regtest network magic, first bytes of every blk record.
pub const REGTEST_MAGIC: [u8; 4] = [0xfa, 0xbf, 0xb5, 0xda];

/// First height whose block is validated with segwit (and CSV, taproot)
/// rules on btcd regtest: the deployments start in the window 144..288,
/// lock in at 288 and are active from 432 (BIP9, 144-block windows, 108
/// signalling blocks needed). Bitcoin Core has them active from genesis, so
/// a chain that only spends witness outputs from here on suits both.
pub const SEGWIT_HEIGHT: u32 = 432;

/// Blocks between subsidy halvings on regtest.
pub const HALVING_INTERVAL: u32 = 150;

/// Confirmations a coinbase output needs before it can be spent.
pub const COINBASE_MATURITY: u32 = 100;

/// Consensus limits a block must stay under.
pub const MAX_BLOCK_WEIGHT: u64 = 4_000_000;
pub const MAX_BLOCK_SIGOPS_COST: u64 = 80_000;

/// Seconds between consecutive generated blocks, before jitter.
pub const BLOCK_INTERVAL_SECS: u32 = 600;

/// BIP9 top bits plus the btcd regtest deployment bits: CSV (0), segwit (1)
/// and taproot (2).
const SIGNALLING_VERSION: i32 = 0x2000_0000 | 0b111;
const PLAIN_VERSION: i32 = 0x2000_0000;

/// Block reward before fees at `height`.
pub fn subsidy(height: u32) -> Amount {
    let halvings = height / HALVING_INTERVAL;
    if halvings >= 64 {
        return Amount::ZERO;
    }
    Amount::from_sat((50 * 100_000_000) >> halvings)
}

/// Block version at `height`: signal every deployment until they are
/// active. Any version is >= 4, as Core's BIP34/65/66 rules require from
/// height 1.
pub fn block_version(height: u32) -> Version {
    if height < SEGWIT_HEIGHT {
        Version::from_consensus(SIGNALLING_VERSION)
    } else {
        Version::from_consensus(PLAIN_VERSION)
    }
}

/// True when a block at `height` is validated with segwit rules on every
/// supported node, so it may carry witness data.
pub fn segwit_active(height: u32) -> bool {
    height >= SEGWIT_HEIGHT
}

/// Time of block 1 (2017-07-14). Block times must be past 2012-04-01:
/// btcd enables P2SH, and with it witness verification, by block time
/// (BIP16's switch-over date), even on regtest.
pub const FIRST_BLOCK_TIME: u32 = 1_500_000_000;

/// Timestamp of the block at `height` (>= 1): [`FIRST_BLOCK_TIME`] plus ten
/// minutes per block and a deterministic jitter of up to about four
/// minutes. Strictly increasing, so always above the median time past.
/// Saturates rather than wrapping; [`chain_fits_before`] tells whether a
/// chain ends in the past.
pub fn block_time(height: u32) -> u32 {
    // A cheap integer hash: the same for every seed, so block times never
    // depend on the transaction content.
    let jitter = height.wrapping_mul(2_654_435_761) >> 24; // 0..=255 s
    let offset =
        u64::from(height.saturating_sub(1)) * u64::from(BLOCK_INTERVAL_SECS) + u64::from(jitter);
    u32::try_from(u64::from(FIRST_BLOCK_TIME) + offset).unwrap_or(u32::MAX)
}

/// True when a chain of `tip_height` blocks has every timestamp before
/// `now` (Unix seconds) minus a day, so nodes never see future blocks.
pub fn chain_fits_before(tip_height: u32, now: u64) -> bool {
    u64::from(block_time(tip_height)) + 86_400 < now && block_time(tip_height) < u32::MAX
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subsidy_halves_every_150_blocks_and_ends() {
        assert_eq!(subsidy(0), Amount::from_sat(5_000_000_000));
        assert_eq!(subsidy(149), Amount::from_sat(5_000_000_000));
        assert_eq!(subsidy(150), Amount::from_sat(2_500_000_000));
        assert_eq!(subsidy(300), Amount::from_sat(1_250_000_000));
        assert_eq!(subsidy(150 * 64), Amount::ZERO);
        assert_eq!(subsidy(u32::MAX), Amount::ZERO);
    }

    #[test]
    fn block_times_strictly_increase() {
        let genesis = 1_296_688_602;
        assert!(block_time(1) > genesis);
        // BIP16's switch-over time, which btcd checks by block time.
        assert!(block_time(1) >= 1_333_238_400);
        let mut prev = block_time(1);
        for h in 2..10_000 {
            let t = block_time(h);
            assert!(t > prev, "height {h}");
            prev = t;
        }
    }

    #[test]
    fn presets_end_in_the_past() {
        let mid_2026 = 1_780_000_000;
        for preset in crate::Preset::ALL {
            assert!(
                chain_fits_before(preset.shape().blocks, mid_2026),
                "{preset}"
            );
        }
        assert!(!chain_fits_before(1_000_000, mid_2026));
    }

    #[test]
    fn versions_signal_until_activation() {
        assert_eq!(block_version(1).to_consensus() & 0b111, 0b111);
        assert_eq!(
            block_version(SEGWIT_HEIGHT - 1).to_consensus() & 0b111,
            0b111
        );
        assert_eq!(block_version(SEGWIT_HEIGHT).to_consensus(), 0x2000_0000);
    }
}
