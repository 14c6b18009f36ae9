//! The shape of a chain, measured: transactions per block, inputs and
//! outputs per transaction, the output type mix, address reuse and
//! transaction sizes. The generator keeps these for every chain it makes
//! (`DIR/stats.json`); [`ChainStats::from_blocks`] measures any blocks
//! directory independently. [`crate::mainnet`] holds the mainnet figures
//! they are compared with.

use std::collections::HashSet;
use std::fmt;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::Path;

use bitcoin::{Script, Transaction};
use serde::{Deserialize, Serialize};

use crate::blkfile::BlkError;

/// File name of the statistics inside a chaingen output directory.
pub const STATS_FILE: &str = "stats.json";

/// The standard output types, as Bitcoin Core's `getrawtransaction` names
/// them (P2SH covers wrapped segwit, which only shows when spent).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum OutputClass {
    P2pk,
    P2pkh,
    P2sh,
    P2wpkh,
    P2wsh,
    P2tr,
    BareMultisig,
    OpReturn,
    Other,
}

impl OutputClass {
    pub const ALL: [OutputClass; 9] = [
        OutputClass::P2pk,
        OutputClass::P2pkh,
        OutputClass::P2sh,
        OutputClass::P2wpkh,
        OutputClass::P2wsh,
        OutputClass::P2tr,
        OutputClass::BareMultisig,
        OutputClass::OpReturn,
        OutputClass::Other,
    ];

    pub fn of(script: &Script) -> OutputClass {
        if script.is_p2pkh() {
            OutputClass::P2pkh
        } else if script.is_p2sh() {
            OutputClass::P2sh
        } else if script.is_p2wpkh() {
            OutputClass::P2wpkh
        } else if script.is_p2wsh() {
            OutputClass::P2wsh
        } else if script.is_p2tr() {
            OutputClass::P2tr
        } else if script.is_op_return() {
            OutputClass::OpReturn
        } else if script.is_p2pk() {
            OutputClass::P2pk
        } else if script.is_multisig() {
            OutputClass::BareMultisig
        } else {
            OutputClass::Other
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            OutputClass::P2pk => "p2pk",
            OutputClass::P2pkh => "p2pkh",
            OutputClass::P2sh => "p2sh",
            OutputClass::P2wpkh => "p2wpkh",
            OutputClass::P2wsh => "p2wsh",
            OutputClass::P2tr => "p2tr",
            OutputClass::BareMultisig => "bare-multisig",
            OutputClass::OpReturn => "op-return",
            OutputClass::Other => "other",
        }
    }

    /// Position in [`OutputClass::ALL`].
    pub fn index(self) -> usize {
        OutputClass::ALL
            .iter()
            .position(|c| *c == self)
            .expect("every class is in ALL")
    }
}

/// Upper bounds of the buckets of [`ChainStats::inputs_histogram`] and
/// [`ChainStats::outputs_histogram`]: 0 (coinbase inputs), 1, 2, 3, 4,
/// 5-9, 10-99, 100 and more.
pub const COUNT_BUCKETS: [u64; 8] = [0, 1, 2, 3, 4, 9, 99, u64::MAX];

fn bucket(n: u64) -> usize {
    COUNT_BUCKETS
        .iter()
        .position(|&max| n <= max)
        .expect("the last bucket is unbounded")
}

/// Counts over a whole chain, genesis included. Means and shares are
/// derived from them, so stats of chain parts add up.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChainStats {
    pub blocks: u64,
    /// Transactions, coinbases included.
    pub txs: u64,
    /// Inputs that spend a coin (coinbase inputs are not counted).
    pub inputs: u64,
    /// Outputs of every kind, coinbase and OP_RETURN outputs included.
    pub outputs: u64,
    /// Outputs by type, in [`OutputClass::ALL`] order.
    pub outputs_by_class: [u64; 9],
    /// Outputs, OP_RETURN excluded, whose script an earlier output of the
    /// chain already paid.
    pub reused_outputs: u64,
    /// Serialized bytes of all transactions, witnesses included.
    pub tx_bytes: u64,
    /// Virtual bytes (weight / 4, rounded up per transaction).
    pub tx_vbytes: u64,
    /// Transactions by spending-input count, in [`COUNT_BUCKETS`].
    pub inputs_histogram: [u64; 8],
    /// Transactions by output count, in [`COUNT_BUCKETS`].
    pub outputs_histogram: [u64; 8],
    /// Blocks at the end of the chain holding nothing but their coinbase:
    /// the tail a chain with placeholder signatures ends with (left out of
    /// the files of chains without one, which stay as they were).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub coinbase_only_tail: u64,
    /// Counted only by the generator of a chain with silent payments
    /// (absent from the files of every other chain, and from
    /// [`ChainStats::from_blocks`], which would need every spent output).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub silent_payments: Option<SilentPaymentStats>,
}

/// Silent payments (BIP-352) in a chain.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SilentPaymentStats {
    /// Transactions a silent-payment index keeps a record of: eligible by
    /// `osprey-sp` (docs/silent-payments.md, 2.2).
    pub eligible_txs: u64,
    /// Transactions paying at least one of the chain's receivers.
    pub paying_txs: u64,
    /// Outputs paying them.
    pub outputs: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl ChainStats {
    /// Counts one transaction; `reused_outputs` of its outputs pay a script
    /// paid before.
    pub fn record_tx(&mut self, tx: &Transaction, reused_outputs: u64) {
        let spends = if tx.is_coinbase() {
            0
        } else {
            tx.input.len() as u64
        };
        self.txs += 1;
        self.inputs += spends;
        self.outputs += tx.output.len() as u64;
        for out in &tx.output {
            self.outputs_by_class[OutputClass::of(&out.script_pubkey).index()] += 1;
        }
        self.reused_outputs += reused_outputs;
        self.tx_bytes += tx.total_size() as u64;
        self.tx_vbytes += tx.vsize() as u64;
        self.inputs_histogram[bucket(spends)] += 1;
        self.outputs_histogram[bucket(tx.output.len() as u64)] += 1;
    }

    /// Counts the end of a block of `txs` transactions, whose transactions
    /// were recorded.
    pub fn record_block_end(&mut self, txs: usize) {
        self.blocks += 1;
        if txs == 1 {
            self.coinbase_only_tail += 1;
        } else {
            self.coinbase_only_tail = 0;
        }
    }

    /// Measures the `blk*.dat` files of `blocks_dir` (genesis first).
    /// Reuse is found with a set of 64-bit script hashes: about 10 bytes
    /// of memory per distinct script, so ~1.4 GB for a 100M-transaction
    /// chain. The generator counts reuse as it goes instead, in constant
    /// memory.
    ///
    /// # Errors
    /// When the files cannot be read.
    pub fn from_blocks(blocks_dir: &Path) -> Result<ChainStats, BlkError> {
        let mut stats = ChainStats::default();
        let mut seen: HashSet<u64> = HashSet::new();
        for block in crate::read_blocks(blocks_dir)? {
            let block = block?;
            for tx in &block.txdata {
                let reused = tx
                    .output
                    .iter()
                    .filter(|o| !o.script_pubkey.is_op_return())
                    .filter(|o| {
                        let mut h = DefaultHasher::new();
                        o.script_pubkey.as_bytes().hash(&mut h);
                        !seen.insert(h.finish())
                    })
                    .count();
                stats.record_tx(tx, reused as u64);
            }
            stats.record_block_end(block.txdata.len());
        }
        Ok(stats)
    }

    pub fn inputs_per_tx(&self) -> f64 {
        ratio(self.inputs, self.txs)
    }

    pub fn outputs_per_tx(&self) -> f64 {
        ratio(self.outputs, self.txs)
    }

    pub fn txs_per_block(&self) -> f64 {
        ratio(self.txs, self.blocks)
    }

    /// Transactions per block before the [`ChainStats::coinbase_only_tail`]:
    /// the figure of the shape a chain was generated to.
    pub fn txs_per_block_before_tail(&self) -> f64 {
        ratio(
            self.txs - self.coinbase_only_tail,
            self.blocks - self.coinbase_only_tail,
        )
    }

    pub fn mean_tx_size(&self) -> f64 {
        ratio(self.tx_bytes, self.txs)
    }

    pub fn mean_tx_vsize(&self) -> f64 {
        ratio(self.tx_vbytes, self.txs)
    }

    pub fn class_count(&self, class: OutputClass) -> u64 {
        self.outputs_by_class[class.index()]
    }

    /// Share of all outputs that are of `class`.
    pub fn class_share(&self, class: OutputClass) -> f64 {
        ratio(self.class_count(class), self.outputs)
    }

    /// Share of the outputs that can pay someone (OP_RETURN excluded) whose
    /// script was paid before: OXT's "address reuse ratio", (outputs − new
    /// scripts) / outputs.
    pub fn reuse_rate(&self) -> f64 {
        ratio(
            self.reused_outputs,
            self.outputs - self.class_count(OutputClass::OpReturn),
        )
    }

    /// Writes the statistics as pretty JSON to `dir/stats.json`.
    ///
    /// # Errors
    /// When the file cannot be written.
    pub fn save(&self, dir: &Path) -> std::io::Result<()> {
        let text = serde_json::to_string_pretty(self).expect("stats serialise");
        std::fs::write(dir.join(STATS_FILE), text)
    }
}

fn ratio(a: u64, b: u64) -> f64 {
    a as f64 / b.max(1) as f64
}

impl fmt::Display for ChainStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "{} blocks, {} txs ({:.1} per block), {:.3} inputs and {:.3} outputs per tx",
            self.blocks,
            self.txs,
            self.txs_per_block(),
            self.inputs_per_tx(),
            self.outputs_per_tx()
        )?;
        writeln!(
            f,
            "mean tx size {:.1} B ({:.1} vB); address reuse {:.1}% of outputs",
            self.mean_tx_size(),
            self.mean_tx_vsize(),
            100.0 * self.reuse_rate()
        )?;
        let mix: Vec<String> = OutputClass::ALL
            .iter()
            .filter(|c| self.class_count(**c) > 0)
            .map(|c| format!("{} {:.2}%", c.name(), 100.0 * self.class_share(*c)))
            .collect();
        writeln!(f, "output types: {}", mix.join(", "))?;
        let labels = ["0", "1", "2", "3", "4", "5-9", "10-99", "100+"];
        let histogram = |counts: &[u64; 8]| {
            labels
                .iter()
                .zip(counts)
                .filter(|(_, n)| **n > 0)
                .map(|(l, n)| format!("{l}: {:.1}%", 100.0 * ratio(*n, self.txs)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        writeln!(f, "txs by inputs: {}", histogram(&self.inputs_histogram))?;
        write!(f, "txs by outputs: {}", histogram(&self.outputs_histogram))?;
        if let Some(sp) = &self.silent_payments {
            write!(
                f,
                "\nsilent payments: {} eligible txs ({:.1}%), {} paying ({:.2}% of the eligible), {} outputs",
                sp.eligible_txs,
                100.0 * ratio(sp.eligible_txs, self.txs),
                sp.paying_txs,
                100.0 * ratio(sp.paying_txs, sp.eligible_txs),
                sp.outputs
            )?;
        }
        if self.coinbase_only_tail > 0 {
            write!(
                f,
                "\nthe last {} blocks hold only their coinbase ({:.1} txs per block before them)",
                self.coinbase_only_tail,
                self.txs_per_block_before_tail()
            )?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sign::{Key, ScriptKind};
    use bitcoin::blockdata::constants::genesis_block;
    use bitcoin::script::Builder;

    #[test]
    fn classes_cover_the_standard_types() {
        let key = Key::from_seed(1, 1);
        let class = |kind| OutputClass::of(&key.script_pubkey(kind));
        assert_eq!(class(ScriptKind::P2pkh), OutputClass::P2pkh);
        assert_eq!(class(ScriptKind::P2shP2wpkh), OutputClass::P2sh);
        assert_eq!(class(ScriptKind::P2wpkh), OutputClass::P2wpkh);
        assert_eq!(class(ScriptKind::P2wsh), OutputClass::P2wsh);
        assert_eq!(class(ScriptKind::P2tr), OutputClass::P2tr);
        assert_eq!(class(ScriptKind::P2trEnvelope(100)), OutputClass::P2tr);
        let genesis = genesis_block(bitcoin::Network::Regtest);
        assert_eq!(
            OutputClass::of(&genesis.txdata[0].output[0].script_pubkey),
            OutputClass::P2pk
        );
        let multisig = Builder::new()
            .push_opcode(bitcoin::opcodes::all::OP_PUSHNUM_1)
            .push_slice(key.public_key().serialize())
            .push_slice(Key::from_seed(1, 2).public_key().serialize())
            .push_opcode(bitcoin::opcodes::all::OP_PUSHNUM_2)
            .push_opcode(bitcoin::opcodes::all::OP_CHECKMULTISIG)
            .into_script();
        assert_eq!(OutputClass::of(&multisig), OutputClass::BareMultisig);
        assert_eq!(
            OutputClass::of(&bitcoin::ScriptBuf::new_op_return([1u8; 8])),
            OutputClass::OpReturn
        );
    }

    #[test]
    fn buckets_split_counts() {
        assert_eq!(bucket(0), 0);
        assert_eq!(bucket(1), 1);
        assert_eq!(bucket(4), 4);
        assert_eq!(bucket(5), 5);
        assert_eq!(bucket(9), 5);
        assert_eq!(bucket(10), 6);
        assert_eq!(bucket(100), 7);
        assert_eq!(bucket(u64::MAX), 7);
    }
}
