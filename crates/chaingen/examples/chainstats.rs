//! Prints the shape of a blocks directory: the measures of
//! `osprey_chaingen::stats` next to the mainnet figures, and how long the
//! scripts' histories are.
//! `cargo run --release -p osprey-chaingen --example chainstats -- DIR/blocks`.

use std::collections::HashMap;
use std::path::PathBuf;

use osprey_chaingen::{mainnet, ChainStats};

#[allow(clippy::print_stdout)] // the report is the program's output
fn main() -> anyhow::Result<()> {
    let dir: PathBuf = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| "blocks".into());
    let stats = ChainStats::from_blocks(&dir)?;
    println!("{stats}");
    for d in mainnet::compare(&stats) {
        println!(
            "{:<20} mainnet {:>10.4}  chain {:>10.4}  {:>+6.1}%",
            d.measure,
            d.target,
            d.measured,
            100.0 * d.relative()
        );
    }

    // History rows per script: one per funding and one per spending.
    let mut uses: HashMap<bitcoin::ScriptBuf, u32> = HashMap::new();
    let mut spk_of: HashMap<bitcoin::OutPoint, bitcoin::ScriptBuf> = HashMap::new();
    for block in osprey_chaingen::read_blocks(&dir)? {
        for tx in &block?.txdata {
            let txid = tx.compute_txid();
            for input in &tx.input {
                if let Some(spk) = spk_of.remove(&input.previous_output) {
                    *uses.entry(spk).or_default() += 1;
                }
            }
            for (vout, out) in tx.output.iter().enumerate() {
                let s = &out.script_pubkey;
                if !s.is_op_return() {
                    *uses.entry(s.clone()).or_default() += 1;
                    spk_of.insert(
                        bitcoin::OutPoint {
                            txid,
                            vout: vout as u32,
                        },
                        s.clone(),
                    );
                }
            }
        }
    }
    println!("unspent outputs at tip {}", spk_of.len());
    let mut histogram: std::collections::BTreeMap<u32, u64> = std::collections::BTreeMap::new();
    for n in uses.values() {
        let bucket = if *n <= 4 { *n } else { n.next_power_of_two() };
        *histogram.entry(bucket).or_default() += 1;
    }
    println!(
        "scripts {}; history length (funding + spending rows, bucketed) -> scripts: {histogram:?}",
        uses.len()
    );
    let mut top: Vec<u32> = uses.values().copied().collect();
    top.sort_unstable_by(|a, b| b.cmp(a));
    top.truncate(15);
    println!("longest histories: {top:?}");
    Ok(())
}
