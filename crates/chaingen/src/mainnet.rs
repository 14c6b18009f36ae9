//! Published mainnet figures the `mainnet` preset is generated to match,
//! and the comparison of a chain's [`ChainStats`] with them.
//!
//! Reference period: the whole chain, cumulatively, up to about the end of
//! 2023 (height ~823,800, ~950M transactions). A projection of a mainnet
//! index is a projection of the whole chain: the number of history rows and
//! scripts follows the cumulative outputs, inputs and reuse, and the blocks
//! to read follow the cumulative transaction sizes. Recent blocks are
//! fuller (~2,660 transactions in 2023) and more segwit; the per-block
//! figure here is the whole-chain ratio, so a generated chain has as many
//! blocks per transaction as mainnet has. `--txs-per-block` overrides it
//! for a recent-blocks shape.
//!
//! Where a source gives totals, the ratio is derived here; each figure says
//! how. The output type mix is the weakest figure: the only count-based
//! breakdown we could read covers blocks 0–400,000 (see
//! [`OUTPUT_MIX`]); the later eras are our estimate.

use crate::stats::{ChainStats, OutputClass};

/// Relative deviation the mainnet preset is held to for every figure.
pub const TOLERANCE: f64 = 0.10;

/// Transactions per block over the whole chain: 937,337,142 transactions
/// (Bitcoin Core's `nchaintx`) in the 821,629 blocks up to height 821,628
/// (December 2023), from `bitcoin-cli dumptxoutset` as published by
/// Shigeyuki Azuchi, "現在のBitcoinのUTXOセットの内訳" (blog "Develop with
/// pleasure!", 2023-12-18). Consistent with the 1,000,000,000th transaction
/// in block 842,241 (May 2024; 1,187 per block), as widely reported from
/// mempool.space and Clark Moody's dashboard.
pub const TXS_PER_BLOCK: f64 = 937_337_142.0 / 821_629.0;

/// Transactions up to block 613,999 (January 2020): 470,445,762 through
/// 2019 (sum of the yearly counts of Clark Moody's dashboard, reported with
/// the one-billion milestone in May 2024) plus ~3,300 blocks of January
/// 2020 at ~2,300 each.
const TXS_TO_JANUARY_2020: f64 = 478.0e6;

/// Outputs per transaction: "nearly 1.3 billion" non-zero outputs up to
/// block 613,999, BitMEX Research, "Bitcoin spending accuracy levels are
/// improving" (2020), over [`TXS_TO_JANUARY_2020`]. Zero-value OP_RETURN
/// outputs are not in that count (~3% more; within the tolerance).
pub const OUTPUTS_PER_TX: f64 = 1.3e9 / TXS_TO_JANUARY_2020;

/// Spending inputs per transaction: the same 1.3 billion outputs less the
/// 64.5 million still unspent in January 2020 (Jameson Lopp's 2019 review,
/// reported by Bitcoinist, 2020-01-03), over [`TXS_TO_JANUARY_2020`].
pub const INPUTS_PER_TX: f64 = (1.3e9 - 64.5e6) / TXS_TO_JANUARY_2020;

/// Share of outputs paying an already used address: "around 50% of
/// transaction outputs are sent to previously used addresses" (above 75%
/// in 2013), BitMEX Research, "Bitcoin Address Re-use Statistics", using
/// OXT's reuse ratio (outputs − new addresses) / outputs; OXT's series as
/// quoted by Kyle Torpey (LongHash, March 2019): 77.6% in February 2013,
/// 41.3% in December 2017, 53.6% in March 2019.
pub const REUSE_RATE: f64 = 0.50;

/// Mean serialized transaction size, witness included: the block data grew
/// to 537 GB by the end of 2023 (446 GB a year before; Jameson Lopp's 2023
/// review, as reported in "Bitcoin – 2023 in numbers", Tremplin, 2024)
/// over 949,415,588 transactions 2009–2023 (the yearly counts above).
/// Cross-check: ~590 B, the mean of `getblockstats` `avgtxsize` since
/// genesis (Blockchain Analysis blog, "Bitcoin block size", 2023); 2023
/// alone: 91 GB / 144M = 632 B.
pub const MEAN_TX_SIZE: f64 = 537.0e9 / 949_415_588.0;

/// Output type shares over the whole chain (sum 1). Anchor: Felix Weis's
/// count of scriptPubKey templates in blocks 0–400,000 (gist
/// "scriptPubKey-templates-0-400000.json", 2016): 319,721,182 P2PKH,
/// 10,083,919 P2SH, under a million each of P2PK, bare multisig and
/// OP_RETURN — 96% P2PKH. Later eras are our estimate, weighted by the
/// yearly transaction counts: legacy-dominated 2016–2017 (~480M outputs,
/// P2SH rising with multisig and wrapped segwit), 2018–2020 (~880M, P2WPKH
/// rising, OP_RETURN from Omni and VeriBlock), 2021–2022 (~550M, mostly
/// P2WPKH), 2023 (~360M, P2TR from inscriptions, bare multisig from
/// Stamps). The cumulative counts of 0xB10C's transactionfee.info "Output
/// Types by Count" and mainnet-observer's "Cumulative Outputs by Script
/// Type" charts should replace these when at hand. P2PK (~0.04%) is left
/// out.
pub const OUTPUT_MIX: [(OutputClass, f64); 7] = [
    (OutputClass::P2pkh, 0.510),
    (OutputClass::P2sh, 0.170),
    (OutputClass::P2wpkh, 0.240),
    (OutputClass::P2wsh, 0.013),
    (OutputClass::P2tr, 0.040),
    (OutputClass::OpReturn, 0.026),
    (OutputClass::BareMultisig, 0.001),
];

/// Target share of `class` in [`OUTPUT_MIX`] (0 when not listed).
pub fn output_share(class: OutputClass) -> f64 {
    OUTPUT_MIX
        .iter()
        .find(|(c, _)| *c == class)
        .map_or(0.0, |(_, share)| *share)
}

/// One compared figure.
#[derive(Clone, Debug, PartialEq)]
pub struct Deviation {
    pub measure: String,
    pub target: f64,
    pub measured: f64,
}

impl Deviation {
    /// (measured − target) / target.
    pub fn relative(&self) -> f64 {
        (self.measured - self.target) / self.target
    }

    pub fn within_tolerance(&self) -> bool {
        self.relative().abs() <= TOLERANCE
    }
}

/// Every mainnet figure next to the same measure of `stats`.
pub fn compare(stats: &ChainStats) -> Vec<Deviation> {
    let mut deviations = vec![
        // A placeholder chain's coinbase-only tail is not of the shape.
        (
            "txs per block",
            TXS_PER_BLOCK,
            stats.txs_per_block_before_tail(),
        ),
        ("inputs per tx", INPUTS_PER_TX, stats.inputs_per_tx()),
        ("outputs per tx", OUTPUTS_PER_TX, stats.outputs_per_tx()),
        ("address reuse", REUSE_RATE, stats.reuse_rate()),
        ("mean tx size", MEAN_TX_SIZE, stats.mean_tx_size()),
    ]
    .into_iter()
    .map(|(measure, target, measured)| Deviation {
        measure: measure.to_string(),
        target,
        measured,
    })
    .collect::<Vec<_>>();
    deviations.extend(OUTPUT_MIX.iter().map(|(class, share)| Deviation {
        measure: format!("{} share", class.name()),
        target: *share,
        measured: stats.class_share(*class),
    }));
    deviations
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn figures_are_consistent() {
        let mix: f64 = OUTPUT_MIX.iter().map(|(_, s)| s).sum();
        assert!((mix - 1.0).abs() < 1e-9, "{mix}");
        assert!((TXS_PER_BLOCK - 1_140.8).abs() < 0.1);
        assert!((OUTPUTS_PER_TX - 2.72).abs() < 0.01);
        assert!((INPUTS_PER_TX - 2.585).abs() < 0.01);
        assert!((MEAN_TX_SIZE - 565.6).abs() < 0.1);
        // Mainnet keeps ~5% of outputs unspent; inputs follow outputs.
        const { assert!(INPUTS_PER_TX < OUTPUTS_PER_TX) };
    }
}
