//! The `mainnet` preset against the published mainnet figures of
//! `osprey_chaingen::mainnet`, measured from the written blocks; the stats
//! the generator reports are those of the blocks; and the same comparison
//! tells other presets apart.

use std::path::Path;

use osprey_chaingen::mainnet::{self, Deviation};
use osprey_chaingen::stats::STATS_FILE;
use osprey_chaingen::{generate, ChainStats, Config, Preset, Shape, Signatures};

fn seed() -> u64 {
    // Replay a failure with OSPREY_TEST_SEED=<seed>.
    std::env::var("OSPREY_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(42)
}

/// Generates `shape` into `dir` and returns the stats measured from the
/// blocks, after checking the generator reported and saved the same.
fn generate_and_measure(dir: &Path, preset: Preset, shape: Shape) -> ChainStats {
    let config = Config {
        preset: preset.name().into(),
        seed: seed(),
        shape,
        signatures: Signatures::Real,
    };
    let (_, progress) = generate(config, dir, &mut |_| {}).expect("generation succeeds");
    let measured = ChainStats::from_blocks(&dir.join("blocks")).unwrap();
    assert_eq!(progress.chain, measured, "reported stats are the blocks'");
    let saved: ChainStats =
        serde_json::from_str(&std::fs::read_to_string(dir.join(STATS_FILE)).unwrap()).unwrap();
    assert_eq!(saved, measured, "saved stats are the blocks'");
    measured
}

fn off(stats: &ChainStats) -> Vec<Deviation> {
    mainnet::compare(stats)
        .into_iter()
        .filter(|d| !d.within_tolerance())
        .collect()
}

#[test]
fn mainnet_preset_is_within_ten_percent_of_every_figure() {
    // The smallest chain that can match: segwit activates at height 432
    // on btcd's regtest, so the segwit output types (29% of mainnet's
    // outputs) must all be made after it, and the transactions before it
    // (a uniform 1,141 per block) must stay under ~2/3 of the chain.
    // ~700k transactions: ~85 s of CPU, mostly signing.
    let dir = tempfile::tempdir().unwrap();
    let shape = Preset::Mainnet.shape();
    let shape = Shape {
        blocks: Shape::blocks_for_txs(700_000, shape.txs_per_block),
        ..shape
    };
    let stats = generate_and_measure(dir.path(), Preset::Mainnet, shape);
    let off = off(&stats);
    assert!(
        off.is_empty(),
        "seed {}: off by more than {}%: {off:#?}\n{stats}",
        seed(),
        100.0 * mainnet::TOLERANCE
    );
}

#[test]
fn the_default_preset_is_told_apart() {
    let dir = tempfile::tempdir().unwrap();
    let stats = generate_and_measure(dir.path(), Preset::Tiny, Preset::Tiny.shape());
    let off = off(&stats);
    let names: Vec<&str> = off.iter().map(|d| d.measure.as_str()).collect();
    for measure in [
        "txs per block",
        "inputs per tx",
        "address reuse",
        "mean tx size",
    ] {
        assert!(
            names.contains(&measure),
            "{measure} passes: {off:#?}\n{stats}"
        );
    }
}
