//! Prints the shape of a blocks directory: transactions, inputs and outputs
//! per transaction, output kinds, and how often scripts are reused.
//! `cargo run --release -p osprey-chaingen --example chainstats -- DIR/blocks`.

use std::collections::HashMap;
use std::path::PathBuf;

#[allow(clippy::print_stdout)] // the report is the program's output
fn main() -> anyhow::Result<()> {
    let dir: PathBuf = std::env::args()
        .nth(1)
        .map(PathBuf::from)
        .unwrap_or_else(|| "blocks".into());
    let (mut blocks, mut txs, mut inputs, mut outputs, mut weight) = (0u64, 0u64, 0u64, 0u64, 0u64);
    let mut kinds: HashMap<&'static str, u64> = HashMap::new();
    let mut uses: HashMap<bitcoin::ScriptBuf, u32> = HashMap::new();
    let mut spk_of: HashMap<bitcoin::OutPoint, bitcoin::ScriptBuf> = HashMap::new();
    for block in osprey_chaingen::read_blocks(&dir)? {
        let block = block?;
        blocks += 1;
        weight += block.weight().to_wu();
        for tx in &block.txdata {
            txs += 1;
            let txid = tx.compute_txid();
            if !tx.is_coinbase() {
                inputs += tx.input.len() as u64;
                for input in &tx.input {
                    if let Some(spk) = spk_of.remove(&input.previous_output) {
                        *uses.entry(spk).or_default() += 1;
                    }
                }
                outputs += tx.output.len() as u64;
            }
            for (vout, out) in tx.output.iter().enumerate() {
                let s = &out.script_pubkey;
                let kind = if s.is_p2pkh() {
                    "p2pkh"
                } else if s.is_p2sh() {
                    "p2sh"
                } else if s.is_p2wpkh() {
                    "p2wpkh"
                } else if s.is_p2wsh() {
                    "p2wsh"
                } else if s.is_p2tr() {
                    "p2tr"
                } else if s.is_op_return() {
                    "op_return"
                } else {
                    "other"
                };
                *kinds.entry(kind).or_default() += 1;
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
    let transfers = txs - blocks;
    println!(
        "blocks {blocks}, txs {txs} ({transfers} transfers), avg weight {} WU",
        weight / blocks.max(1)
    );
    println!(
        "per transfer: {:.2} inputs, {:.2} outputs; unspent outputs at tip {}",
        inputs as f64 / transfers.max(1) as f64,
        outputs as f64 / transfers.max(1) as f64,
        spk_of.len()
    );
    let mut kinds: Vec<_> = kinds.into_iter().collect();
    kinds.sort();
    println!("output kinds: {kinds:?}");
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
